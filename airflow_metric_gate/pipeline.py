"""The gate as four stages: ingest, select, persist, evaluate.

The command line runs them in one process; the Airflow operators run one each and pass small
references between them through XCom (the values stay in the record and the store).  Nothing
here imports Airflow.
"""

from __future__ import annotations

import hashlib
import json
import time
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

from airflow_metric_gate.decision import blocks, policy_of
from airflow_metric_gate.decision.calibrated import SHIFT_ADOPT, Candidate, choose_history, night_trusted
from airflow_metric_gate.declarations import GateDeclaration
from airflow_metric_gate.enums import ERROR, FAIL, Aggregate, RunStatus
from airflow_metric_gate.evaluation import (
    DEFAULT_HISTORY_LIMIT,
    DEFAULT_MIN_HISTORY,
)
from airflow_metric_gate.judging import (
    CalibratedJudgement,
    RunJudgement,
    judge_calibrated,
    judge_run,
    merge_judgements,
    outcome_of,
)
from airflow_metric_gate.limits import (
    MAX_CONSTRAINT_KEY_BYTES,
    MAX_METRIC_KEY_BYTES,
    MAX_NAME_BYTES,
    MAX_STEP,
    MAX_STEPS_KEY_BYTES,
    history_limit_problem,
    key_problem,
    logical_date_problem,
    step_problem,
)
from airflow_metric_gate.records import Record, read_record
from airflow_metric_gate.rules import is_warning
from airflow_metric_gate.selection import LAST_STEP, Selection, dropped_warnings, more_warnings, select_steps
from airflow_metric_gate.store import MetricStore, RunRow, StoreInputError, StoreUnavailable
from airflow_metric_gate.store.errors import RunRewritten
from airflow_metric_gate.store.points import PointGroup
from airflow_metric_gate.store.rows import PROVENANCE_COLUMNS, WindowRun
from airflow_metric_gate.verdict import DEFAULT_MAX_RESULTS, band_distance, build_verdict, calibrated_sections

SELECTION_PAYLOAD_VERSION = 1


@dataclass(frozen=True)
class SeriesIdentity:
    """Which nights are comparable: the training job, its hardware and its schedule (SPEC 4).

    :param series: the training job whose nights are comparable.
    :param backend: the hardware.
    :param suite: the schedule or cluster (e.g. ``nightly-8xh100``).
    """

    series: str
    backend: str = "cuda"
    suite: str = "default"


@dataclass
class RunInfo:
    """The run being gated.

    :param run_id: the store run id (the idempotency key).
    :param role: ``baseline`` (feeds future baselines) or ``shadow`` (audit only).
    :param logical_date: orders history; baselines come from earlier logical dates only.
    :param provenance: ``dag_id``, ``airflow_run_id``, ``try_number``, ``map_index``, ``commit_sha``,
        ``training_job_id`` and any free-form fields.
    """

    run_id: str
    role: str = "baseline"
    logical_date: datetime = field(default_factory=lambda: datetime.now(timezone.utc))
    provenance: dict = field(default_factory=dict)


def new_run_id() -> str:
    """Return a fresh store run id for a run outside Airflow."""
    return f"cli-{datetime.now(timezone.utc):%Y%m%dT%H%M%S}-{uuid.uuid4().hex[:8]}"


def airflow_store_run_id(
    dag_id: str, run_id: str, map_index: int | None = -1, *, task_id: str, identity: SeriesIdentity
) -> str:
    """Return the store run id of an Airflow run: the same for every retry or clear of it.

    The id names one persisting task's run of one series identity, so two gate chains in one DAG
    run (two tasks, or two series) never share a store run.

    :param dag_id: the DAG id.
    :param run_id: the Airflow DAG run id.
    :param map_index: the task's map index (``-1`` when not mapped).
    :param task_id: the persisting task's id.
    :param identity: the series identity the task stores.
    """
    index = -1 if map_index is None else int(map_index)
    key = [dag_id, run_id, task_id, index, identity.series, identity.backend, identity.suite]
    digest = hashlib.sha256(json.dumps(key).encode()).hexdigest()[:24]
    return f"af-{digest}"


# -- ingest and select -------------------------------------------------------------------------


def ingest(location: Any, *, format: str = "series") -> Record:
    """Read and validate a record.

    :param location: a file or directory (path or pathlib-like object); for ``mlflow``, the run's location.
    :param format: ``series``, ``rows``, ``tensorboard``, ``csv`` or ``mlflow``.
    """
    return read_record(location, format=format)


def select(record: Record, declarations: Iterable[GateDeclaration]) -> list[Selection]:
    """Select the values every declaration asks for (SPEC 5).

    :param record: the ingested record.
    :param declarations: the resolved declarations.
    """
    return select_steps(record, declarations)


def record_warnings(record: Record, declarations: Iterable[GateDeclaration]) -> list[dict]:
    """Return what the verdict warns about a night's record: dropped points, lines no gate can read.

    See :func:`~airflow_metric_gate.selection.dropped_warnings`; :func:`persist` keeps them with the
    run and :func:`evaluate` puts them in the verdict's ``warnings``.

    :param record: the ingested record.
    :param declarations: the resolved declarations.
    """
    return dropped_warnings(record, list(declarations))


def selection_to_payload(selections: Sequence[Selection]) -> dict:
    """Encode selections with their values: one entry per declaration, values as parallel lists.

    ``PersistValuesOperator`` accepts this as its ``selection`` (values given inline, without a
    record); no operator pushes it to XCom.

    :param selections: from :func:`select`.
    """
    gates = []
    for s in selections:
        entry: dict[str, Any] = {"declaration": s.declaration.to_dict()}
        if s.error is not None:
            entry["error"] = s.error
        else:
            entry["steps"] = s.steps
            entry["values"] = s.values
            if s.declaration.steps == "last":
                entry["at_step"] = s.at_steps[0]
        gates.append(entry)
    return {"version": SELECTION_PAYLOAD_VERSION, "gates": gates}


def payload_to_selection(payload: Mapping) -> list[Selection]:
    """Decode :func:`selection_to_payload` output.

    :param payload: the XCom payload.
    """
    if not isinstance(payload, Mapping) or payload.get("version") != SELECTION_PAYLOAD_VERSION:
        raise ValueError("not a metric-gate selection payload (expected the output of SelectStepsOperator)")
    selections = []
    for entry in payload["gates"]:
        declaration = GateDeclaration.from_dict(entry["declaration"])
        if "error" in entry:
            selections.append(Selection(declaration, error=entry["error"]))
            continue
        steps = list(entry["steps"])
        values = [float(v) for v in entry["values"]]
        at_steps = [entry.get("at_step")] * len(steps) if declaration.steps == "last" else steps
        selections.append(Selection(declaration, steps=steps, values=values, at_steps=at_steps))
    return selections


# -- persist -----------------------------------------------------------------------------------


def check_run(identity: SeriesIdentity, run: RunInfo, selections: Sequence[Selection] = ()) -> None:
    """Check every key, step and date of a run against the limits (:mod:`~airflow_metric_gate.limits`).

    :param identity: the series identity.
    :param run: the run.
    :param selections: the selected values.
    :raises StoreInputError: naming the first value over a limit; nothing was written.
    """
    names = [("series", identity.series), ("backend", identity.backend), ("suite", identity.suite),
             ("run id", run.run_id)]
    names += [(k, run.provenance[k]) for k in PROVENANCE_COLUMNS if isinstance(run.provenance.get(k), str)]
    for what, value in names:
        problem = key_problem(value, MAX_NAME_BYTES)
        if problem:
            raise StoreInputError(f"{what} {value!r} {problem}; nothing was written")
    problem = logical_date_problem(run.logical_date)
    if problem:
        raise StoreInputError(f"{problem}; nothing was written")
    for s in selections:
        d = s.declaration
        for what, value, limit in (("metric_key", d.metric_key, MAX_METRIC_KEY_BYTES),
                                   ("steps_key", d.steps_key, MAX_STEPS_KEY_BYTES),
                                   ("constraint_key", d.constraint_key, MAX_CONSTRAINT_KEY_BYTES)):
            problem = key_problem(value, limit)
            if problem:
                raise StoreInputError(f"{what} {value[:80]!r} {problem}; nothing was written")
        for steps in (s.steps, s.at_steps):
            known = steps if None not in steps else [k for k in steps if k is not None]
            if known and (min(known) < LAST_STEP or max(known) > MAX_STEP):  # type: ignore[type-var,operator]  # no None
                bad = next(k for k in known if k != LAST_STEP and step_problem(k))
                raise StoreInputError(f"{d.metric_key!r}: step {step_problem(bad)}; nothing was written")


#: The provenance key under which a run keeps the warnings of its record (:func:`record_warnings`).
WARNINGS_KEY = "record_warnings"


def persist(
    store: MetricStore,
    identity: SeriesIdentity,
    run: RunInfo,
    selections: Sequence[Selection],
    *,
    warnings: Sequence[Mapping[str, Any]] = (),
    chunk: int | None = None,
) -> dict:
    """Write a run (status ``pending``) and one row per selected (metric, step), atomically.

    Writing the same ``run.run_id`` again replaces that run's rows.

    :param store: the metric store.
    :param identity: the series identity.
    :param run: the run being gated.
    :param selections: from :func:`select`.
    :param warnings: from :func:`record_warnings`: kept with the run (provenance key
        ``record_warnings``) for its verdict.
    :param chunk: values built and sent at a time (default
        :func:`~airflow_metric_gate.chunking.chunk_points`); the rows stored do not depend on it.
    :return: ``{"run_id", "rows", "errors", "declarations", "write_version"}`` (the write version
        names this write of the run id, see :meth:`MetricStore.write_night`); with no declarations
        nothing is stored (a run with no declarations is trusted and stores nothing).
    :raises StoreInputError: a key, step or date is over its limit (:func:`check_run`); nothing
        was written.
    """
    check_run(identity, run, selections)
    if not selections:
        return {"run_id": run.run_id, "rows": 0, "errors": 0, "declarations": 0}
    errors: list[dict] = []
    ordinal = 0
    for s in selections:
        d = s.declaration
        if s.error is not None:
            errors.append({"ordinal": ordinal, "metric_key": d.metric_key, "steps_key": d.steps_key,
                           "constraint_key": d.constraint_key, "message": s.error})
            ordinal += 1
            continue
        ordinal += len(s.values)

    # the selections' own lists, declaration by declaration: no object per value
    groups: list[PointGroup] = []
    ordinal = 0
    for s in selections:
        d = s.declaration
        if s.error is not None:
            ordinal += 1
            continue
        if s.steps:
            groups.append(PointGroup((d.metric_key, d.steps_key, d.constraint_key), ordinal, s.steps, s.values,
                                     s.at_steps))
        ordinal += len(s.steps)

    row = RunRow(
        run_id=run.run_id, series=identity.series, backend=identity.backend, suite=identity.suite,
        role=run.role, status="pending", logical_date=run.logical_date,
        provenance={**run.provenance, **({WARNINGS_KEY: [dict(w) for w in warnings]} if warnings else {})},
        declarations=[s.declaration.summary() for s in selections], selection_errors=errors,
    )
    written = store.write_columns(row, groups, chunk=chunk)
    return {"run_id": run.run_id, "rows": written.rows, "errors": len(errors), "declarations": len(selections),
            "write_version": written.write_version}


# -- judging nights in date order ----------------------------------------------------------------

#: How many pending nights a message spells out (the rest are counted).
MESSAGE_NIGHTS = 10


def describe_runs(runs: Sequence[WindowRun]) -> str:
    """Name runs by logical date and store run id (and Airflow run id when known), oldest first.

    :param runs: e.g. :attr:`~airflow_metric_gate.store.rows.HistoryWindow.pending`.
    """
    names = []
    for r in runs[:MESSAGE_NIGHTS]:
        airflow = f", Airflow run {r.airflow_run_id}" if r.airflow_run_id else ""
        names.append(f"{r.logical_date.isoformat()} (store run {r.run_id}{airflow})")
    more = len(runs) - len(names)
    return ", ".join(names) + (f" and {more} more" if more > 0 else "")


class EarlierRunsPending(StoreUnavailable):
    """A run cannot be judged yet: earlier nights in its history window are still ``pending``.

    Retrying later succeeds once they are judged (or marked), hence a :class:`StoreUnavailable`.

    :param run_id: the store run id that waits.
    :param pending: the earlier runs it waits for, oldest first.
    :param waited: how many seconds it already waited, if it did.
    """

    def __init__(self, run_id: str, pending: Sequence[WindowRun], waited: float | None = None) -> None:
        self.run_id = run_id
        self.pending = list(pending)
        self.waited = waited
        after = f" after waiting {waited:g} s" if waited else ""
        super().__init__(
            f"run {run_id} is not judged{after}: {len(self.pending)} earlier night(s) of its history "
            f"window are still pending (stored, not judged yet): {describe_runs(self.pending)}"
        )


def wait_for_earlier_runs(
    store: MetricStore,
    run_id: str,
    *,
    history_limit: int = DEFAULT_HISTORY_LIMIT,
    timeout: float = 0.0,
    poll: float = 1.0,
    sleep: Any = time.sleep,
    clock: Any = time.monotonic,
) -> None:
    """Return once no earlier night in the run's history window is ``pending``.

    A night is judged against the history window of :meth:`MetricStore.history_window`; while a
    run in that window is still pending it might yet become trusted, so judging now would read too
    little history (a backfill runs many nights at once).

    :param store: the metric store.
    :param run_id: the store run id about to be judged.
    :param history_limit: the baseline's history limit (the window's size).
    :param timeout: how long to poll, in seconds; 0 checks once.
    :param poll: seconds between two checks.
    :param sleep: waits that many seconds (tests pass a fake).
    :param clock: returns the time in seconds (tests pass a fake).
    :raises EarlierRunsPending: earlier nights are still pending when the time is up.
    """
    deadline = clock() + timeout
    while True:
        pending = store.history_window(run_id, history_limit).pending
        if not pending:
            return
        remaining = deadline - clock()
        if remaining <= 0:
            raise EarlierRunsPending(run_id, pending, waited=timeout)
        sleep(min(poll, remaining))


# -- evaluate ----------------------------------------------------------------------------------


def check_evaluate_options(
    *, history_limit: int = DEFAULT_HISTORY_LIMIT, min_history: int = DEFAULT_MIN_HISTORY, aggregate: str = "mean",
    **_: Any,
) -> None:
    """Check the options of :func:`evaluate` (what :func:`run_gate` does before it writes anything).

    :param history_limit: from 1 to :data:`~airflow_metric_gate.limits.MAX_HISTORY_LIMIT`.
    :param min_history: >= 0.
    :param aggregate: ``mean`` or ``median``.
    :raises StoreInputError: an option is out of range.
    """
    problem = Aggregate.problem(aggregate, "aggregate") or history_limit_problem(history_limit)
    if problem:
        raise StoreInputError(problem)
    if type(min_history) is not int or min_history < 0:
        raise StoreInputError(f"min_history must be an integer >= 0, got {min_history!r}")


def evaluate(
    store: MetricStore,
    run_id: str,
    *,
    history_limit: int = DEFAULT_HISTORY_LIMIT,
    min_history: int = DEFAULT_MIN_HISTORY,
    aggregate: str = "mean",
    enforce: bool | None = None,
    all_results: bool = False,
    max_results: int | None = DEFAULT_MAX_RESULTS,
    max_bytes: int | None = None,
    record: bool = True,
    write_version: int | None = None,
    chunk: int | None = None,
) -> dict:
    """Compare a stored run with the history of each of its coordinates and record its trust.

    The run is marked ``trusted`` (every result PASS or INACTIVE) or ``untrusted``, only if it
    still holds the values that were judged: when another writer of the same run id replaced them
    meanwhile, nothing is marked and :class:`~airflow_metric_gate.store.errors.RunRewritten` (a
    retryable store error) is raised, so the stored values, status and counts always come from
    one writer.

    :param store: the metric store.
    :param run_id: the store run id written by :func:`persist`.
    :param history_limit: how many earlier trusted baseline runs form the baseline.
    :param min_history: fewer baseline values make a coordinate INACTIVE.
    :param aggregate: ``mean`` or ``median``.
    :param enforce: make every FAIL or ERROR block (declarations may also enforce themselves).
        Recorded with the run when ``record`` is true; ``None``: ``False`` when recording, else
        as the run's recorded evaluation was (so a rebuilt verdict blocks as the evaluation did).
    :param all_results: list every result in the verdict, not only FAIL and ERROR.
    :param max_results: at most this many results in the verdict.
    :param max_bytes: keep the verdict's JSON below this size (for XCom).
    :param record: mark the run trusted or untrusted; ``False`` only rebuilds the verdict (read-only).
    :param write_version: the write of the run id whose values are to be judged (from
        :func:`persist`); ``None``: the values stored when evaluation starts.
    :param chunk: coordinates read and judged at a time (default
        :func:`~airflow_metric_gate.chunking.chunk_points`); the verdict does not depend on it.
    :return: the verdict (SPEC 10).
    :raises RunRewritten: the run holds another write's values (now, or by the time its verdict
        would be kept).
    """
    check_evaluate_options(history_limit=history_limit, min_history=min_history, aggregate=aggregate)
    run = store.get_run(run_id)
    if run is None:
        raise StoreInputError(f"the metric store has no run {run_id!r}; persist it before evaluating")
    if write_version is not None and run.write_version != write_version:
        raise RunRewritten(run_id, write_version, run.write_version)
    # every value read below is read after this version: marking checks it is still the stored one
    if enforce is None:
        enforce = False if record else bool(run.provenance.get("enforce", False))
    gates = {(d["metric_key"], d["steps_key"], d["constraint_key"]): d for d in run.declarations}
    calibrated = {key for key, gate in gates.items() if policy_of(gate) == "calibrated"}
    run_errors = [(((e["metric_key"], e["steps_key"], e["constraint_key"]), e["ordinal"], e["message"]))
                  for e in run.selection_errors]
    judgement: RunJudgement | None = None
    outcomes: dict[str, dict] = {}
    decisions: dict = {}
    candidates: list | None = None
    starved_reasons: dict = {}
    # a night's FAILs are not all held: of each reference declaration those the verdict can show
    keep = None if all_results or max_results is None else max_results
    reference_gates: dict = {}
    if len(calibrated) < len(gates):  # the reference policy (SPEC 6): one baseline read for the run
        reference_gates = {key: gate for key, gate in gates.items() if key not in calibrated}
        # read and judged chunk by chunk: a night's values and baselines are never held at once
        judgement = judge_run(
            (((v.metric_key, v.steps_key, v.constraint_key), v.step, v.at_step, v.value, v.ordinal, baseline)
             for v, baseline in store.iter_values_and_baselines(run_id, history_limit, chunk=chunk)
             if (v.metric_key, v.steps_key, v.constraint_key) not in calibrated),
            reference_gates,
            [e for e in run_errors if e[0] not in calibrated],
            min_history=min_history, aggregate=aggregate, all_results=all_results, keep=keep,
        )
        worst = _worst_distances(judgement)
        for key in reference_gates:
            night = outcome_of(judgement.per_declaration[key])
            outcomes[_outcome_key(key)] = {"o": night, "d": worst.get(key, 0.0)} if night in ("pass", "fail") \
                else {"o": night}
        starved = [key for key in reference_gates if _cold(judgement, key)]
        if starved:
            candidates = store.judged_candidates(run_id, candidate_limit(history_limit))
            reason = starved_reason(candidates, None)
            if reason:
                starved_reasons.update({key: reason for key in starved})
                _name_starved(judgement.results, starved, reason)
    if calibrated:
        if candidates is None:
            candidates = store.judged_candidates(run_id, candidate_limit(history_limit))
        part = _judge_calibrated(store, run, {key: gates[key] for key in calibrated}, run_errors, candidates,
                                 history_limit=history_limit, min_history=min_history, all_results=all_results)
        decisions = part.decisions
        for key, decision in decisions.items():
            outcomes[_outcome_key(key)] = _with_threshold(decision.stored, decision.report)
            if decision.report.get("starved"):
                starved_reasons[key] = decision.report["starved"]
        judgement = part.judgement if judgement is None else merge_judgements(judgement, part.judgement)
    assert judgement is not None
    ordered, counts, per_gate = judgement.results, judgement.counts, judgement.per_declaration
    results = [r for _, r, _ in ordered]
    trusted = judgement.trusted
    continuing = {key: d.outcome for key, d in decisions.items()}
    extras: list[tuple[int, dict]] = []
    blocking = 0
    for i, (_, r, gate) in enumerate(ordered):
        fields: dict = {}
        if gate["allowlist_reason"]:
            fields["allowlist_reason"] = gate["allowlist_reason"]
        key = (r.metric_key, r.steps_key, r.constraint_key)
        if blocks(r.status, gate, enforce=bool(enforce), outcome=continuing.get(key)):
            if keep is None or key in calibrated:  # the others are counted below
                blocking += 1
            fields["blocking"] = True
        if key in calibrated:
            fields["policy"] = "calibrated"
        if fields:
            extras.append((i, fields))
    if keep is not None:  # the reference declarations' results are not all kept: count them
        for key in reference_gates:
            for status in (FAIL, ERROR):
                n = per_gate[key][status]
                if n and blocks(status, gates[key], enforce=bool(enforce), outcome=continuing.get(key)):
                    blocking += n
    cause = next((o["cause"] for o in outcomes.values() if o.get("cause")), None)
    if cause is None and not trusted:
        cause = next((f"{r.metric_key}: {r.reason}" for r in results if r.status in (FAIL, ERROR)), None)
    if cause:
        outcomes["_cause"] = {"cause": cause[:300]}
    verdict = build_verdict(
        series=run.series, backend=run.backend, suite=run.suite, run_id=run.run_id, role=run.role,
        logical_date=run.logical_date.isoformat(), results=results, trusted=trusted,
        enforced=bool(enforce or any(g["enforce"] for g in run.declarations)), blocking=blocking,
        all_results=all_results, max_results=max_results, max_bytes=max_bytes, extra_fields=extras,
        counts=counts, declaration_counts=per_gate, listed=None if keep is None else counts[FAIL] + counts[ERROR],
        warn_declarations=[key for key, gate in gates.items() if is_warning(gate)],
        sections=calibrated_sections(gates, decisions, starved_reasons),
    )
    warnings = run.provenance.get(WARNINGS_KEY)
    if warnings:  # additive (SPEC 10, 11): present when the record lost points or lines
        verdict["warnings"] = _fitting_warnings(verdict, list(warnings), max_bytes)
    counts = verdict["counts"]
    reason = ", ".join(f"{counts[s]} {s}" for s in counts if counts[s]) or "no declarations"
    if record:
        store.set_status(run_id, RunStatus.TRUSTED.value if trusted else RunStatus.UNTRUSTED.value, reason,
                         enforce=bool(enforce), outcomes=outcomes, write_version=run.write_version)
    return verdict


def _worst_distances(judgement: RunJudgement) -> dict[tuple[str, str, str], float]:
    """Return each reference declaration's worst FAIL distance outside its band (the night chart's measure).

    A declaration without a FAIL is absent (its night's worst distance is 0: every step inside its band).

    :param judgement: the reference declarations' judgement (its FAIL results are always kept).
    """
    worst: dict[tuple[str, str, str], float] = {}
    for _, r, _ in judgement.results:
        if r.status != FAIL or None in (r.current, r.ref, r.lo, r.hi):
            continue
        key = (r.metric_key, r.steps_key, r.constraint_key)
        worst[key] = max(worst.get(key, 0.0), band_distance(r.current, r.ref, r.lo, r.hi))  # type: ignore[arg-type]  # no None
    return worst


def _with_threshold(stored: Mapping[str, Any], report: Mapping[str, Any]) -> dict:
    """Return a calibrated declaration's stored outcome with its night band (``q``: ``z`` passes within ``-+q``).

    Kept for the UI's night chart only; no decision reads it, and outcomes stored without it stay valid.

    :param stored: the decision's outcome for ``runs.outcomes``.
    :param report: the decision's report (its ``threshold``, when the night was judged).
    """
    out = dict(stored)
    if "z" in out and isinstance(report.get("threshold"), (int, float)):
        out["q"] = report["threshold"]
    return out


def _outcome_key(key: tuple[str, str, str]) -> str:
    return json.dumps(list(key))


def candidate_limit(history_limit: int) -> int:
    """How many earlier judged nights are read to choose each declaration's history from.

    :param history_limit: the baseline's history limit.
    """
    return 3 * history_limit + SHIFT_ADOPT + 5


def _cold(judgement: RunJudgement, key: tuple[str, str, str]) -> bool:
    counts = judgement.per_declaration.get(key, {})
    return bool(counts.get("INACTIVE")) and not any(counts.get(s) for s in ("PASS", "FAIL"))


def _candidates_for(candidates: list, key: tuple[str, str, str]) -> list[Candidate]:
    name = _outcome_key(key)
    out = []
    for run_id, date, status, marked, stored in candidates:
        outcome = stored.get(name)
        out.append(Candidate(run_id, date.isoformat(), night_trusted(status, marked, outcome), outcome))
    return out


def starved_reason(candidates: list, key: tuple[str, str, str] | None) -> str | None:
    """Name why a declaration has no trusted history although earlier nights exist, or ``None``.

    :param candidates: the earlier judged nights (:meth:`MetricStore.judged_candidates`), oldest first.
    :param key: the declaration (trust per declaration), or ``None`` for the run's own trust.
    """
    if not candidates:
        return None
    if key is None:
        trusted = [c for c in candidates if (c[3] or c[2]) == "trusted"]
    else:
        trusted = [c for c in _candidates_for(candidates, key) if c.trusted]
    if trusted:
        return None
    latest = candidates[-1]
    cause = (latest[4].get("_cause") or {}).get("cause") if latest[4] else None
    since = candidates[0][1].date().isoformat()
    because = f", the latest because {cause}" if cause else ""
    return (f"starved baseline: no trusted night since {since}: every one of the {len(candidates)} earlier "
            f"night(s) was untrusted{because}")


def _name_starved(results: list, keys: list, reason: str) -> None:
    """Give the INACTIVE results of starved declarations the reason instead of "cold start"."""
    wanted = set(keys)
    for _, r, _ in results:
        if (r.metric_key, r.steps_key, r.constraint_key) in wanted and r.status == "INACTIVE":
            r.reason = reason


def _judge_calibrated(store: MetricStore, run: RunRow, gates: dict, run_errors: list, candidates: list, *,
                      history_limit: int, min_history: int, all_results: bool):
    """Judge a run's calibrated declarations: choose each one's history, read those nights' values, decide.

    One declaration at a time: its values and its chosen nights' values are read, judged and let go
    before the next one's are read.
    """
    choices = {key: choose_history(_candidates_for(candidates, key), history_limit) for key in gates}
    # the nights read: those of every declaration's history (a declaration's recent nights are read
    # only when they are among them)
    needed = sorted({c.run_id for choice in choices.values() for c in choice.history})
    part = None
    for key, gate in gates.items():
        choice = choices[key]
        current, found = store.declaration_night(run.run_id, key, needed)
        for c in choice.history:
            c.values = found.get(c.run_id, {})
        for c in choice.recent:
            c.values = found.get(c.run_id, {})
        one = judge_calibrated({key: [(v.step, v.at_step, v.value, v.ordinal) for v in current]}, {key: gate},
                               [e for e in run_errors if e[0] == key], {key: choice}, run_id=run.run_id,
                               logical_date=run.logical_date.isoformat(), min_history=min_history,
                               all_results=all_results)
        del current, found
        for c in [*choice.history, *choice.recent]:  # judged: its values are not needed again
            c.values = {}
        decision = one.decisions[key]
        if decision.outcome == "inactive" and not choice.history:
            reason = starved_reason(candidates, key)
            if reason:
                decision.report["starved"] = reason
                for r in decision.results:
                    r.reason = reason
        decision.results = []  # one per step: the verdict keeps its own (FAIL, ERROR, or every one)
        part = one if part is None else CalibratedJudgement(merge_judgements(part.judgement, one.judgement),
                                                            {**part.decisions, **one.decisions})
    assert part is not None
    failed = list(dict.fromkeys(e[0] for e in run_errors if e[0] in gates))  # decisions: errors first
    part.decisions = {key: part.decisions[key] for key in [*failed, *(k for k in gates if k not in failed)]}
    return part


def _fitting_warnings(verdict: dict, warnings: list[dict], max_bytes: int | None) -> list[dict]:
    """The warnings, fewer when the verdict must stay below ``max_bytes`` (a last entry counts the left-out ones)."""
    if max_bytes is None:
        return warnings
    left_out = 0
    if warnings and warnings[-1].get("kind") == "more":
        left_out = int(warnings.pop().get("count") or 0)
    while True:
        shown = warnings + ([more_warnings(left_out)] if left_out else [])
        if not warnings or len(json.dumps({**verdict, "warnings": shown}).encode()) <= max_bytes:
            return shown
        warnings.pop()
        left_out += 1


def empty_verdict(identity: SeriesIdentity, run: RunInfo, *, enforce: bool = False) -> dict:
    """Return the verdict of a run with no declarations: trusted, nothing stored.

    :param identity: the series identity.
    :param run: the run.
    :param enforce: whether enforcement was asked for.
    """
    return build_verdict(
        series=identity.series, backend=identity.backend, suite=identity.suite, run_id=run.run_id,
        role=run.role, logical_date=run.logical_date.isoformat(), results=[], trusted=True,
        enforced=enforce, blocking=0,
    )


def run_gate(
    store: MetricStore,
    *,
    record: Any,
    declarations: Sequence[GateDeclaration],
    identity: SeriesIdentity,
    run: RunInfo,
    format: str = "series",
    wait: float = 0.0,
    on_skipped: Callable[[list[tuple[str, str]]], None] | None = None,
    on_stored: Callable[[str], None] | None = None,
    **evaluate_kwargs: Any,
) -> dict:
    """Run all four stages in one process (what ``metric-gate run`` does).

    Bad input (record, declarations, keys, steps, dates, options) raises before anything is written.
    The run is judged only once no earlier night of its history window is pending (see
    :func:`wait_for_earlier_runs`); if some still are after ``wait`` seconds, the run stays stored as
    ``pending`` and :class:`EarlierRunsPending` is raised (running again with the same run id judges it).

    :param store: the metric store.
    :param record: the record location, or the record already read (:func:`ingest`).
    :param declarations: the resolved declarations.
    :param identity: the series identity.
    :param run: the run being gated.
    :param format: the record format.
    :param wait: seconds to wait for earlier pending nights to be judged (0: check once).
    :param on_skipped: called with the entries of a record directory that were skipped, as
        ``(path, reason)`` pairs, when there are any.
    :param on_stored: called with the run id once the run is stored (still ``pending``).
    :param evaluate_kwargs: passed to :func:`evaluate`.
    """
    check_evaluate_options(**evaluate_kwargs)
    check_run(identity, run)
    if not isinstance(record, Record):
        record = ingest(record, format=format)
    if record.skipped and on_skipped is not None:
        on_skipped(record.skipped)
    selections = select(record, declarations)
    if not selections:
        return empty_verdict(identity, run, enforce=bool(evaluate_kwargs.get("enforce")))
    stored = persist(store, identity, run, selections, warnings=record_warnings(record, declarations),
                     chunk=evaluate_kwargs.get("chunk"))
    if on_stored is not None:
        on_stored(run.run_id)
    history_limit = evaluate_kwargs.get("history_limit", DEFAULT_HISTORY_LIMIT)
    wait_for_earlier_runs(store, run.run_id, history_limit=history_limit, timeout=wait)
    return evaluate(store, run.run_id, write_version=stored["write_version"], **evaluate_kwargs)
