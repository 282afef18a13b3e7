"""Evaluate, the gate's last stage: judge a stored run against its history, build its verdict, record its trust."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from airflow_metric_gate.decision import blocks, policy_of
from airflow_metric_gate.enums import ERROR, FAIL, RunStatus
from airflow_metric_gate.judging import RunJudgement, judge_run, merge_judgements, outcome_of
from airflow_metric_gate.pipeline.history import (
    candidate_limit,
    judge_calibrated_declarations,
    outcome_key,
    starved_reason,
)
from airflow_metric_gate.pipeline.identity import RunInfo, SeriesIdentity
from airflow_metric_gate.pipeline.options import EvaluateOptions, evaluate_options
from airflow_metric_gate.pipeline.persisting import WARNINGS_KEY
from airflow_metric_gate.rules import is_warning
from airflow_metric_gate.selection import more_warnings
from airflow_metric_gate.store import MetricStore, StoreInputError
from airflow_metric_gate.store.errors import RunRewritten
from airflow_metric_gate.verdict import (
    VerdictHeader,
    VerdictOptions,
    band_distance,
    build_verdict,
    calibrated_sections,
)


def evaluate(
    store: MetricStore,
    run_id: str,
    *,
    options: EvaluateOptions | None = None,
    record: bool = True,
    write_version: int | None = None,
    **keywords: Any,
) -> dict:
    """Compare a stored run with the history of each of its coordinates and record its trust.

    The run is marked ``trusted`` (every result PASS or INACTIVE) or ``untrusted``, only if it
    still holds the values that were judged: when another writer of the same run id replaced them
    meanwhile, nothing is marked and :class:`~airflow_metric_gate.store.errors.RunRewritten` (a
    retryable store error) is raised, so the stored values, status and counts always come from
    one writer.  ``enforce`` is recorded with the run when ``record`` is true (so a rebuilt
    verdict blocks as the evaluation did).

    :param store: the metric store.
    :param run_id: the store run id written by :func:`~airflow_metric_gate.pipeline.persist`.
    :param options: the history and the verdict's listing (:class:`EvaluateOptions`); or give them
        as ``keywords``.
    :param record: mark the run trusted or untrusted; ``False`` only rebuilds the verdict (read-only).
    :param write_version: the write of the run id whose values are to be judged (from
        :func:`~airflow_metric_gate.pipeline.persist`); ``None``: the values stored when evaluation starts.
    :param keywords: the fields of :class:`EvaluateOptions` one by one (``history_limit``,
        ``min_history``, ``aggregate``, ``enforce``, ``all_results``, ``max_results``,
        ``max_bytes``, ``chunk``), instead of ``options``.
    :return: the verdict (SPEC 10).
    :raises TypeError: a keyword is no option, or both ``options`` and keywords were given.
    :raises StoreInputError: an option is out of range, or the store has no such run.
    :raises RunRewritten: the run holds another write's values (now, or by the time its verdict
        would be kept).

    See also :func:`~airflow_metric_gate.pipeline.run_gate` (all four stages).
    """
    given = evaluate_options(options, keywords, caller="evaluate")
    given.check()
    history_limit, min_history, aggregate = given.history_limit, given.min_history, given.aggregate
    enforce, all_results, max_results = given.enforce, given.all_results, given.max_results
    max_bytes, chunk = given.max_bytes, given.chunk
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
    # a night's FAILs are not all held: of each declaration those the verdict can show
    keep = None if all_results or max_results is None else max_results
    reference_gates: dict = {}
    if len(calibrated) < len(gates):  # the reference policy (SPEC 6): one baseline read for the run
        reference_gates = {key: gate for key, gate in gates.items() if key not in calibrated}
        # read and judged chunk by chunk: a night's values and baselines are never held at once
        judgement = judge_run(
            (value for value in store.iter_values_and_baselines(run_id, history_limit, chunk=chunk)
             if value[0] not in calibrated),
            reference_gates,
            [e for e in run_errors if e[0] not in calibrated],
            min_history=min_history, aggregate=aggregate, all_results=all_results, keep=keep,
        )
        worst = _worst_distances(judgement)
        for key in reference_gates:
            night = outcome_of(judgement.per_declaration[key])
            outcomes[outcome_key(key)] = {"o": night, "d": worst.get(key, 0.0)} if night in ("pass", "fail") \
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
        in_order = {key: gate for key, gate in gates.items() if key in calibrated}  # the declarations' order
        part = judge_calibrated_declarations(store, run, in_order, run_errors, candidates,
                                             history_limit=history_limit, min_history=min_history,
                                             all_results=all_results, keep=keep)
        decisions = part.decisions
        for key, decision in decisions.items():
            outcomes[outcome_key(key)] = _with_threshold(decision.stored, decision.report)
            if decision.report.get("starved"):
                starved_reasons[key] = decision.report["starved"]
        judgement = part.judgement if judgement is None else merge_judgements(judgement, part.judgement)
    assert judgement is not None
    ordered, counts, per_gate = judgement.results, judgement.counts, judgement.per_declaration
    results = [r for _, r, _ in ordered]
    trusted = judgement.trusted
    continuing = {key: d.outcome for key, d in decisions.items()}
    blocking, extras = _blocking(judgement, gates, calibrated, continuing, enforce=bool(enforce), keep=keep)
    cause = next((o["cause"] for o in outcomes.values() if o.get("cause")), None)
    if cause is None and not trusted:
        cause = next((f"{r.metric_key}: {r.reason}" for r in results if r.status in (FAIL, ERROR)), None)
    if cause:
        outcomes["_cause"] = {"cause": cause[:300]}
    header = VerdictHeader(
        series=run.series, backend=run.backend, suite=run.suite, run_id=run.run_id, role=run.role,
        logical_date=run.logical_date.isoformat(), trusted=trusted,
        enforced=bool(enforce or any(g["enforce"] for g in run.declarations)), blocking=blocking,
    )
    verdict = build_verdict(header, results, VerdictOptions(
        all_results=all_results, max_results=max_results, max_bytes=max_bytes, extra_fields=extras,
        counts=counts, declaration_counts=per_gate, listed=None if keep is None else counts[FAIL] + counts[ERROR],
        warn_declarations=[key for key, gate in gates.items() if is_warning(gate)],
        sections=calibrated_sections(gates, decisions, starved_reasons),
    ))
    warnings = run.provenance.get(WARNINGS_KEY)
    if warnings:  # additive (SPEC 10, 11): present when the record lost points or lines
        verdict["warnings"] = _fitting_warnings(verdict, list(warnings), max_bytes)
    counts = verdict["counts"]
    reason = ", ".join(f"{counts[s]} {s}" for s in counts if counts[s]) or "no declarations"
    if record:
        store.set_status(run_id, RunStatus.TRUSTED.value if trusted else RunStatus.UNTRUSTED.value, reason,
                         enforce=bool(enforce), outcomes=outcomes, write_version=run.write_version)
    return verdict


def _blocking(judgement: RunJudgement, gates: dict, calibrated: set, continuing: dict, *, enforce: bool,
              keep: int | None) -> tuple[int, list[tuple[int, dict]]]:
    """Count the results that block (:func:`~airflow_metric_gate.decision.policy.blocks`) and mark them.

    Returns the count and each marked result's extra verdict fields (``blocking``,
    ``allowlist_reason``, ``policy``), by index into the judgement's results.  When ``keep`` is set,
    the declarations' results are not all kept (under either policy): their blocking ones are
    counted from the declaration counts instead.
    """
    extras: list[tuple[int, dict]] = []
    blocking = 0
    for i, (_, r, gate) in enumerate(judgement.results):
        fields: dict = {}
        if gate["allowlist_reason"]:
            fields["allowlist_reason"] = gate["allowlist_reason"]
        key = (r.metric_key, r.steps_key, r.constraint_key)
        if blocks(r.status, gate, enforce=enforce, outcome=continuing.get(key)):
            if keep is None:  # else not every result is kept: they are counted below
                blocking += 1
            fields["blocking"] = True
        if key in calibrated:
            fields["policy"] = "calibrated"
        if fields:
            extras.append((i, fields))
    if keep is not None:  # the declarations' results are not all kept: count them
        for key in gates:
            for status in (FAIL, ERROR):
                n = judgement.per_declaration[key][status]
                if n and blocks(status, gates[key], enforce=enforce, outcome=continuing.get(key)):
                    blocking += n
    return blocking, extras


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



def _cold(judgement: RunJudgement, key: tuple[str, str, str]) -> bool:
    counts = judgement.per_declaration.get(key, {})
    return bool(counts.get("INACTIVE")) and not any(counts.get(s) for s in ("PASS", "FAIL"))



def _name_starved(results: list, keys: list, reason: str) -> None:
    """Give the INACTIVE results of starved declarations the reason instead of "cold start"."""
    wanted = set(keys)
    for _, r, _ in results:
        if (r.metric_key, r.steps_key, r.constraint_key) in wanted and r.status == "INACTIVE":
            r.reason = reason



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
    return build_verdict(VerdictHeader(
        series=identity.series, backend=identity.backend, suite=identity.suite, run_id=run.run_id,
        role=run.role, logical_date=run.logical_date.isoformat(), trusted=True, enforced=enforce, blocking=0,
    ), [])
