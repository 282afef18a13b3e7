"""Building the verdict: what on-call reads in XCom and in ``--json`` output (SPEC section 10).

Rendering it for reading (the task log, ``metric-gate run``/``show``, the demo) is
:mod:`airflow_metric_gate.report`.
"""

from __future__ import annotations

import json
import math
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from airflow_metric_gate.decision.policy import TRUSTING_OUTCOMES
from airflow_metric_gate.enums import ERROR, FAIL, STATUSES
from airflow_metric_gate.evaluation import NIGHT_BOUND, Result

if TYPE_CHECKING:
    from airflow_metric_gate.decision.calibrated import Decision

VERDICT_SCHEMA = "airflow-metric-gate/verdict/v1"
DEFAULT_MAX_RESULTS = 200
#: The verdict pushed to XCom is kept below this many bytes of JSON (results are truncated with a count).
XCOM_MAX_BYTES = 60_000
#: A FAIL's distance divides by ``max(|ref|, DISTANCE_TINY)``, so a zero baseline still gives a number.
DISTANCE_TINY = 1e-12
#: The largest distance a verdict gives (a larger one, or one that cannot be worked out, is this):
#: where Airflow keeps XCom values (PostgreSQL ``jsonb``) a number comes back as an exact numeric
#: without exponent, and one of 2**64 or more cannot reach a task any more.
DISTANCE_MAX = 1e15
#: The largest magnitude of a number in the verdict the evaluate task pushes to XCom (see :func:`for_xcom`).
XCOM_NUMBER_MAX = 1e18
#: The ``bound`` of the calibrated policy's declaration-level FAIL results (no step).
CALIBRATED_NIGHT_BOUNDS = frozenset({"night", "drift", "blowup", "constraint", "shape"})

#: A declaration: ``(metric_key, steps_key, constraint_key)``.
DeclarationKey = tuple[str, str, str]


def for_xcom(value: Any) -> Any:
    """Return a verdict (or any JSON value) as the evaluate task pushes it to XCom.

    Every number is kept within ``-XCOM_NUMBER_MAX .. XCOM_NUMBER_MAX``: Airflow keeps XCom values
    in a PostgreSQL ``jsonb`` column, which gives a number back as an exact numeric without
    exponent, so a value of 1e25 (a divergence) would come back as an integer of more than 64 bits
    that no task could pull (the approval, the notices).  Such a value is written as the bound, with
    its sign; the result's ``reason`` text keeps the value, and the task log shows the verdict whole.

    :param value: a verdict (SPEC 10), or part of one.
    """
    if isinstance(value, bool) or value is None or isinstance(value, str):
        return value
    if isinstance(value, (int, float)):
        return value if -XCOM_NUMBER_MAX <= value <= XCOM_NUMBER_MAX else math.copysign(XCOM_NUMBER_MAX, value)
    if isinstance(value, Mapping):
        return {k: for_xcom(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [for_xcom(v) for v in value]
    return value


def band_distance(current: float, ref: float, lo: float, hi: float) -> float:
    """Return how far a value lies outside its band, relative to the baseline (0.0 inside it).

    ``(current - hi) / max(|ref|, DISTANCE_TINY)`` above the band,
    ``(lo - current) / max(|ref|, DISTANCE_TINY)`` below it; capped at :data:`DISTANCE_MAX` so it
    stays valid JSON and within 64 bits where Airflow keeps XCom values.

    :param current: tonight's value.
    :param ref: the baseline reference.
    :param lo: the lower end of the band.
    :param hi: the upper end of the band.
    """
    scale = max(abs(ref), DISTANCE_TINY)
    if current > hi:
        distance = (current - hi) / scale
    elif current < lo:
        distance = (lo - current) / scale
    else:
        return 0.0
    return min(distance, DISTANCE_MAX)


class _Declaration:
    """What one declaration's results add up to, gathered in one pass."""

    __slots__ = ("key", "counts", "first", "last", "above", "below", "worst", "worst_distance", "error", "failing",
                 "night", "calibrated")

    def __init__(self, key: DeclarationKey) -> None:
        self.key = key
        self.counts = {status: 0 for status in STATUSES}
        self.first: int | None = None
        self.last: int | None = None
        self.above = self.below = self.failing = False
        self.worst: Result | None = None
        self.worst_distance = 0.0
        self.error: str | None = None
        self.night: dict | None = None  # the whole-night FAIL (opt-in night_mean_k), if any
        self.calibrated: dict | None = None  # the calibrated policy's failing night, if any

    def entry(self, counts: Mapping[str, int]) -> dict:
        worst = self.worst
        out = {
            "metric_key": self.key[0], "steps_key": self.key[1], "constraint_key": self.key[2],
            "counts": {status: int(counts.get(status, 0)) for status in STATUSES},
            "first_failing_step": self.first, "last_failing_step": self.last,
            "side": ("both" if self.below else "above") if self.above else ("below" if self.below else None),
            "worst": None if worst is None else {
                "step": worst.step, "at_step": worst.at_step, "current": worst.current, "ref": worst.ref,
                "lo": worst.lo, "hi": worst.hi, "side": worst.side, "bound": worst.bound,
                "distance": self.worst_distance,
            },
            "error": self.error,
        }
        if self.night is not None:  # only a declaration whose whole night failed has it
            out["night"] = self.night
        if self.calibrated is not None:
            out["calibrated_night"] = self.calibrated
        return out


def summarize(
    results: Sequence[Result],
    declaration_counts: Mapping[DeclarationKey, Mapping[str, int]] | None = None,
) -> tuple[list[dict], dict[int, float]]:
    """Return the verdict's ``summary`` and the distance of every FAIL (by index into ``results``).

    The summary has one entry per declaration with any FAIL or ERROR, worst first: the
    declarations with a FAIL by their worst distance (largest first; ties keep declaration
    order), then those with only ERRORs, in declaration order.  One pass, no per-result objects:
    it runs over every result of a run, 100,000 of them or more.

    :param results: every FAIL and ERROR result (and, without ``declaration_counts``, every result).
    :param declaration_counts: results per status of each declaration; by default counted from ``results``.
    """
    tiny, biggest = DISTANCE_TINY, DISTANCE_MAX
    counting = declaration_counts is None
    distances: dict[int, float] = {}
    gathered: dict[DeclarationKey, _Declaration] = {}
    d: _Declaration | None = None
    for i, r in enumerate(results):
        if d is None or d.key[0] != r.metric_key or d.key[1] != r.steps_key or d.key[2] != r.constraint_key:
            key = (r.metric_key, r.steps_key, r.constraint_key)
            d = gathered.get(key)
            if d is None:
                d = gathered[key] = _Declaration(key)
        status = r.status
        if counting:
            d.counts[status] += 1
        if status == FAIL and r.step is None and r.bound in CALIBRATED_NIGHT_BOUNDS:  # the calibrated night
            z, q = r.current, r.hi
            distance = biggest if z is None or not q else min((abs(z) - q) / max(abs(q), tiny), biggest)
            distances[i] = max(distance, 0.0)
            d.calibrated = {"bound": r.bound, "side": r.side, "z": z, "threshold": q, "distance": distances[i],
                            "reason": r.reason}
            if r.side == "above":
                d.above = True
            elif r.side == "below":
                d.below = True
            d.failing = True
        elif status == FAIL and r.bound == NIGHT_BOUND:  # a whole night's FAIL: no step, never the worst step
            distance = min((abs(r.current) - r.hi) / max(r.hi, tiny), biggest)  # type: ignore[arg-type,operator,type-var]  # a night FAIL has current and hi
            distances[i] = distance
            d.night = {"statistic": r.current, "night_mean_k": r.hi, "steps": r.n, "side": r.side,
                       "distance": distance}
            if r.side == "above":
                d.above = True
            else:
                d.below = True
            d.failing = True
        elif status == FAIL:
            scale = abs(r.ref)  # type: ignore[arg-type]  # a step FAIL has current, ref, lo and hi
            if scale < tiny:
                scale = tiny
            if r.side == "above":
                distance = (r.current - r.hi) / scale  # type: ignore[operator]  # as above
                d.above = True
            else:
                distance = (r.lo - r.current) / scale  # type: ignore[operator]  # as above
                d.below = True
            if distance > biggest:
                distance = biggest
            distances[i] = distance
            step = r.at_step if r.step == -1 else r.step
            if step is not None:
                if d.first is None or step < d.first:
                    d.first = step
                if d.last is None or step > d.last:
                    d.last = step
            if d.worst is None or distance > d.worst_distance:
                d.worst, d.worst_distance = r, distance
            d.failing = True
        elif status == ERROR:
            if d.error is None:
                d.error = r.reason
            d.failing = True
    found = {} if declaration_counts is None else declaration_counts
    entries = [d.entry(d.counts if counting else found.get(d.key, {})) for d in gathered.values() if d.failing]
    # worst first: by the worst step's distance, then the declarations whose whole night alone failed, then ERRORs
    entries.sort(key=lambda e: (0 if e["worst"] is not None else 1 if "night" in e or "calibrated_night" in e else 2,
                                -e["worst"]["distance"] if e["worst"] is not None else 0.0))
    return entries, distances


def _encoded_size(verdict: dict) -> int:
    # json.dumps defaults (", " and ": "): the larger of the usual encodings, so any consumer's copy fits.
    return len(json.dumps(verdict).encode())


@dataclass(frozen=True)
class VerdictHeader:
    """The run a verdict is about and what was decided: the verdict's first top-level fields.

    :param series: series name.
    :param backend: hardware backend.
    :param suite: schedule or cluster.
    :param run_id: the store run id.
    :param role: ``baseline`` or ``shadow``.
    :param logical_date: ISO 8601 logical date of the run.
    :param trusted: whether the run is trusted.
    :param enforced: whether enforcement applied to this run (run-level or any declaration).
    :param blocking: how many FAIL/ERROR results are enforced (they fail the task / exit 1).
    """

    series: str
    backend: str
    suite: str
    run_id: str
    role: str
    logical_date: str
    trusted: bool
    enforced: bool
    blocking: int


@dataclass(frozen=True)
class VerdictOptions:
    """How a verdict lists its results, how large it may grow, and what the results given stand for.

    :param all_results: list every result in declaration then step order; by default only the FAIL
        and ERROR results, worst first (FAILs by distance, largest first, then ERRORs).
    :param max_results: at most this many results (``None``: no limit); the rest are counted in ``truncated``.
    :param max_bytes: also keep the JSON encoding below this many bytes by truncating further.
    :param extra_fields: ``(index into results, fields)`` pairs merged into those results' dicts.
    :param counts: results per status, when the results given are only some of them (the FAIL and
        ERROR results); by default counted from the results.
    :param declaration_counts: results per status of each declaration, keyed
        ``(metric_key, steps_key, constraint_key)``, for the ``summary``; by default counted from the results.
    :param warn_declarations: the declarations of ``severity: warn``: their summary entries and
        results say ``"severity": "warn"`` (reported as warnings, never blocking).
    :param sections: further top-level fields (:func:`calibrated_sections`), added after ``truncated``.
    :param listed: how many FAIL and ERROR results the run has, when the results given are only those
        a verdict can show (:class:`~airflow_metric_gate.judging.KeptResults`); ``truncated`` counts
        the others too.  By default the results given are all of them.
    """

    all_results: bool = False
    max_results: int | None = DEFAULT_MAX_RESULTS
    max_bytes: int | None = None
    extra_fields: Sequence[tuple[int, dict]] = ()
    counts: dict[str, int] | None = None
    declaration_counts: Mapping[DeclarationKey, Mapping[str, int]] | None = None
    warn_declarations: Collection[DeclarationKey] = ()
    sections: Mapping[str, object] | None = None
    listed: int | None = None


def build_verdict(header: VerdictHeader, results: Sequence[Result], options: VerdictOptions | None = None) -> dict:
    """Assemble the versioned verdict.

    :param header: the run and what was decided.
    :param results: every result in declaration then step order; or, with ``options.counts`` and
        ``options.declaration_counts``, at least every FAIL and ERROR result (the ``summary`` needs
        them all).
    :param options: what to list and how much (default :class:`VerdictOptions`).

    See also :class:`VerdictOptions` and :func:`summarize`.
    """
    o = VerdictOptions() if options is None else options
    counts, max_results, all_results, listed = o.counts, o.max_results, o.all_results, o.listed
    if counts is None:
        counts = {status: 0 for status in STATUSES}
        for r in results:
            counts[r.status] += 1
    extras = dict(o.extra_fields)
    summary, distances = summarize(results, o.declaration_counts)
    warned = set(o.warn_declarations)
    if warned:
        for entry in summary:
            if (entry["metric_key"], entry["steps_key"], entry["constraint_key"]) in warned:
                entry["severity"] = "warn"
        for i, r in enumerate(results):
            if (r.metric_key, r.steps_key, r.constraint_key) in warned:
                extras[i] = {**extras.get(i, {}), "severity": "warn"}
    if all_results:
        chosen = list(range(len(results)))
    else:
        fails = sorted(distances, key=distances.__getitem__, reverse=True)  # stable: ties keep their order
        errors = [i for i, r in enumerate(results) if r.status == ERROR]
        chosen = fails + errors
    kept = chosen if max_results is None else chosen[:max_results]
    total = len(chosen) if listed is None or all_results else max(listed, len(chosen))
    verdict: dict[str, Any] = {
        "schema": VERDICT_SCHEMA,
        "series": header.series,
        "backend": header.backend,
        "suite": header.suite,
        "run_id": header.run_id,
        "role": header.role,
        "logical_date": header.logical_date,
        "trusted": header.trusted,
        "enforced": header.enforced,
        "blocking": header.blocking,
        "counts": counts,
        "summary": summary,
        "results": [{**results[i].to_dict(), **extras.get(i, {})} for i in kept],
        "truncated": total - len(kept),
    }
    if o.sections:
        verdict.update(o.sections)
    max_bytes = o.max_bytes
    if max_bytes is not None and _encoded_size(verdict) > max_bytes:
        full = verdict["results"]
        lo, hi = 0, len(full)
        while lo < hi:  # the largest prefix of results that fits
            mid = (lo + hi + 1) // 2
            verdict["results"] = full[:mid]
            if _encoded_size(verdict) <= max_bytes:
                lo = mid
            else:
                hi = mid - 1
        verdict["results"] = full[:lo]
        verdict["truncated"] = total - lo
    return verdict


def _key_fields(key: DeclarationKey) -> dict:
    return {"metric_key": key[0], "steps_key": key[1], "constraint_key": key[2]}


def calibrated_sections(gates: Mapping[DeclarationKey, Mapping], decisions: Mapping[DeclarationKey, Decision],
                        starved: Mapping[DeclarationKey, str]) -> dict:
    """Return the verdict's sections beyond SPEC 10, each only when it has something to say.

    ``policy`` (``calibrated`` or ``mixed``, absent for ``reference``); ``declarations`` (each
    calibrated declaration's night: outcome, statistic, band, direction, trusted); ``level_shifts``,
    ``drifts``, ``within_night`` (a night that got worse from some step on), ``improvements`` and
    ``blowups``; ``starved`` (declarations without trusted history
    because earlier nights were untrusted, under every policy).

    :param gates: the run's declarations, by their keys.
    :param decisions: the calibrated declarations' decisions
        (:class:`~airflow_metric_gate.decision.calibrated.Decision`), by their keys.
    :param starved: why each declaration without trusted history has none (under every policy).
    """
    out: dict = {}
    if decisions:
        out["policy"] = "calibrated" if len(decisions) == len(gates) else "mixed"
        nights, shifts, drifts, better, blown, within = [], [], [], [], [], []
        for key, decision in decisions.items():
            report = decision.report
            outcome = decision.outcome
            entry = {**_key_fields(key), "outcome": outcome, "trusted": outcome in TRUSTING_OUTCOMES}
            for name in ("direction", "nights", "z", "threshold", "level", "side", "steps_judged", "driven_count",
                         "false_alarm", "starved", "missing_count", "bridge"):
                if name in report:
                    entry[name] = report[name]
            nights.append(entry)
            if "shift" in report:
                shifts.append({**_key_fields(key), **report["shift"]})
            if "adopted_shift" in report:
                shifts.append({**_key_fields(key), **report["adopted_shift"], "adopted": True})
            if "drift" in report:
                drifts.append({**_key_fields(key), **report["drift"]})
            if "shape" in report:
                within.append({**_key_fields(key), **report["shape"]})
            if "improvement" in report:
                better.append({**_key_fields(key), **report["improvement"]})
            if "blowup" in report:
                blown.append({**_key_fields(key), **report["blowup"]})
        out["declarations"] = nights
        for name, items in (("level_shifts", shifts), ("drifts", drifts), ("within_night", within),
                            ("improvements", better),
                            ("blowups", blown)):
            if items:
                out[name] = items
    if starved:
        out["starved"] = [{**_key_fields(key), "reason": reason} for key, reason in starved.items()]
    return out
