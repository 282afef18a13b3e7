"""Replay of a series with calibrated declarations: each night judged as evaluate would have judged it.

Every night of the series is read once (the runs with the blocks of their values, then every value
in one ordered pass) and held in memory; nights are judged in logical-date order by the functions
:func:`airflow_metric_gate.pipeline.evaluate` uses: each calibrated declaration's history is
chosen by :func:`~airflow_metric_gate.decision.calibrated.choose_history` from the same earlier
nights evaluate reads (:func:`~airflow_metric_gate.pipeline.candidate_limit` of them, from the
latest rebaseline marker on) and judged by :func:`~airflow_metric_gate.judging.judge_calibrated`;
a reference declaration of the same run by :func:`~airflow_metric_gate.judging.judge_run` against
the run-level trusted nights.  With ``trust="stored"`` an earlier night counts as evaluate counted
it (its stored status, marks and outcomes); with ``replayed``, as replay judged it.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from itertools import islice
from typing import Any

from airflow_metric_gate.decision import policy_of
from airflow_metric_gate.decision.calibrated import Candidate, choose_history, night_trusted
from airflow_metric_gate.decision.history import choose_bridge
from airflow_metric_gate.declarations import GateDeclaration
from airflow_metric_gate.enums import STATUSES
from airflow_metric_gate.judging import judge_calibrated, judge_run, merge_judgements, outcome_of
from airflow_metric_gate.pipeline import candidate_limit
from airflow_metric_gate.replay_reading import (
    Key,
    by_logical_date,
    changed_while_read,
    checked_declarations,
    same_literal,
    series_nights,
)
from airflow_metric_gate.replay_report import replay_summary
from airflow_metric_gate.rules import declaration_summary
from airflow_metric_gate.store import MetricStore

__all__ = ["replay_calibrated"]

class _Night:
    __slots__ = ("run", "values", "errors", "outcomes", "trusted")

    def __init__(self, run: Any) -> None:
        self.run = run
        self.values: dict[Key, list[tuple[int, int | None, float]]] = {}
        self.errors: dict[Key, str] = {}
        self.outcomes: dict[Key, Mapping[str, Any]] = {}  # replayed
        self.trusted = False  # replayed


def replay_calibrated(store: MetricStore, series: str, backend: str, suite: str, *,
                      declarations: Sequence[GateDeclaration] | None, history_limit: int, min_history: int,
                      aggregate: str, trust: str, policy: str | None) -> dict:
    """Replay a series whose declarations include calibrated ones (see the module); write nothing.

    See also :func:`airflow_metric_gate.replay.replay`, whose report it returns.

    :param store: the open store.
    :param series: the series name.
    :param backend: the backend.
    :param suite: the suite.
    :param declarations: declarations to judge with instead of the stored ones; ``None``: the stored ones.
    :param history_limit: how many earlier trusted baseline runs form a baseline.
    :param min_history: fewer baseline values make a coordinate INACTIVE.
    :param aggregate: ``mean`` or ``median``.
    :param trust: ``replayed`` or ``stored``: which trust decides that a night feeds later baselines.
    :param policy: the policy of the declarations that set none; ``None``: as they are.
    """
    declarations, warnings = checked_declarations(declarations, history_limit=history_limit,
                                                  min_history=min_history, aggregate=aggregate, trust=trust)
    given: dict[Key, dict] | None = None
    if declarations is not None:
        given = {(d.metric_key, d.steps_key, d.constraint_key): declaration_summary(d) for d in declarations}
    runs_and_blocks = series_nights(store, series, backend, suite)
    stream = store.iter_series_points(series, backend, suite)
    nights: list[_Night] = []
    expected = 0
    for run, blocks in runs_and_blocks:
        night = _Night(run)
        for metric_key, steps_key, constraint_key, n in blocks:
            expected += n
            night.values[(metric_key, steps_key, constraint_key)] = [
                (step, at_step, value) for step, value, at_step in islice(stream, n)]
        for e in run.selection_errors:
            night.errors[(e["metric_key"], e["steps_key"], e["constraint_key"])] = e["message"]
        nights.append(night)
    if next(iter(stream), None) is not None or sum(len(v) for n in nights for v in n.values.values()) != expected:
        raise changed_while_read(series)

    failed: dict[Key, list] = {}
    gate_summaries: dict[Key, dict] = {}
    judged_nights: dict[Key, int] = {}
    missing_nights: dict[Key, int] = {}
    report_nights = []
    totals = {s: 0 for s in STATUSES}
    done: list[_Night] = []
    for group in by_logical_date(nights, lambda night: night.run.logical_date):
        for night in group:
            entry = _judge(night, done, group, given, policy, trust, history_limit=history_limit,
                           min_history=min_history, aggregate=aggregate, failed=failed, summaries=gate_summaries)
            for key in entry.pop("_judged"):
                judged_nights[key] = judged_nights.get(key, 0) + 1
            for key in entry.pop("_missing"):
                missing_nights[key] = missing_nights.get(key, 0) + 1
            for s, c in entry["counts"].items():
                totals[s] += c
            report_nights.append(entry)
        done.extend(group)

    gates = [{**summary, "nights_judged": judged_nights.get(key, 0), "nights_not_stored": missing_nights.get(key, 0),
              "nights_failed": len(failed.get(key, [])), "failed": failed.get(key, [])}
             for key, summary in gate_summaries.items()]
    return {
        "series": series, "backend": backend, "suite": suite,
        "settings": {"declarations": "given" if given is not None else "stored", "history_limit": history_limit,
                     "min_history": min_history, "aggregate": aggregate, "trust": trust, "policy": policy},
        "nights": report_nights,
        "declarations": gates,
        "not_replayable": [],
        "warnings": warnings,
        "summary": replay_summary(report_nights, report_nights, len(gates), totals),
    }


def _judge(night: _Night, done: list[_Night], group: Sequence[_Night], given: dict | None, policy: str | None,
           trust: str, *, history_limit: int, min_history: int, aggregate: str, failed: dict,
           summaries: dict) -> dict:
    run = night.run
    if given is not None:
        gates = dict(given)
    else:
        gates = {(d["metric_key"], d["steps_key"], d["constraint_key"]): declaration_summary(d)
                 for d in run.declarations}
        if policy is not None:
            gates = {k: (g if g.get("policy") else {**g, "policy": policy}) for k, g in gates.items()}
    values, errors = _routed(night, gates)
    # the earlier nights evaluate reads: judged baseline runs since the latest rebaseline marker
    markers = sorted({n.run.logical_date for n in (*done, *group)
                      if n.run.rebaseline and n.run.logical_date <= run.logical_date})
    fence = markers[-1] if markers else None
    judged = [n for n in done if n.run.role == "baseline" and n.run.status != "pending"]
    earlier = [n for n in judged if fence is None or n.run.logical_date >= fence][-candidate_limit(history_limit):]
    # the nights before the latest marker (and not before the one before it): a short history's bridge
    before = [] if fence is None else [
        n for n in judged if n.run.logical_date < fence and (len(markers) < 2 or n.run.logical_date >= markers[-2])
    ][-candidate_limit(history_limit):]
    calibrated = {k: g for k, g in gates.items() if policy_of(g) == "calibrated"}
    reference = {k: g for k, g in gates.items() if k not in calibrated}
    judgement = None
    outcomes: dict[Key, Mapping[str, Any]] = {}
    if reference:
        trusted_runs = [n for n in earlier if _run_trusted(n, trust)][-history_limit:]
        order = 0
        rows = []
        for key in reference:
            past = [_by_step(n, key) for n in trusted_runs]
            for step, at_step, value in values.get(key, ()):
                baseline = [p[step] for p in past if step in p]
                rows.append((key, step, at_step, value, order, baseline))
                order += 1
        judgement = judge_run(rows, reference, [(k, 0, m) for k, m in errors.items() if k in reference],
                              min_history=min_history, aggregate=aggregate, all_results=False)
        for key in reference:
            outcomes[key] = {"o": outcome_of(judgement.per_declaration[key])}
    if calibrated:
        choices = {}
        for key in calibrated:
            choices[key] = choose_history(_candidates(earlier, key, trust), history_limit)
            if len(earlier) < history_limit:  # as evaluate: a level that began at the marker a few nights ago
                choose_bridge(choices[key], choose_history(_candidates(before, key, trust), history_limit).history,
                              history_limit)
        rows_by_key = {key: [(s, a, v, i) for i, (s, a, v) in enumerate(values.get(key, ()))] for key in calibrated}
        part = judge_calibrated(rows_by_key, calibrated, [(k, 0, m) for k, m in errors.items() if k in calibrated],
                                choices, run_id=run.run_id, logical_date=run.logical_date.isoformat(),
                                min_history=min_history)
        for key, decision in part.decisions.items():
            outcomes[key] = decision.stored
        judgement = part.judgement if judgement is None else merge_judgements(judgement, part.judgement)
    night.outcomes = outcomes
    night.trusted = judgement.trusted if judgement is not None else True
    entry = {"run_id": run.run_id, "logical_date": run.logical_date.isoformat(), "role": run.role,
             "stored_status": run.status, "replayed_status": "trusted" if night.trusted else "untrusted",
             "counts": {s: c for s, c in (judgement.counts if judgement else {}).items() if c},
             "outcomes": {"|".join(k): o.get("o") for k, o in outcomes.items()},
             "_judged": [k for k in gates if k in values or k in errors],
             "_missing": [k for k in gates if k not in values and k not in errors]}
    by_gate: dict[Key, list] = {}
    for _, result, gate in (judgement.results if judgement else ()):
        if result.status in ("FAIL", "ERROR"):
            by_gate.setdefault((gate["metric_key"], gate["steps_key"], gate["constraint_key"]), []).append(result)
    for key, gate in gates.items():
        summaries.setdefault(key, gate)
    for key, results in by_gate.items():
        failed.setdefault(key, []).append({"run_id": run.run_id, "logical_date": entry["logical_date"],
                                           "role": run.role, "stored_status": run.status,
                                           "results": [r.to_dict() for r in results]})
    return entry


def _candidates(nights: Sequence[_Night], key: Key, trust: str) -> list[Candidate]:
    """The nights as one declaration's candidate nights, with its values."""
    out = []
    for n in nights:
        c = Candidate(n.run.run_id, n.run.logical_date.isoformat(), _declaration_trusted(n, key, trust),
                      _outcome(n, key, trust), marked_untrusted=_latest_mark(n) == "untrusted")
        stored_key = _stored_key(n, key)
        if stored_key is not None:
            c.values = {step: value for step, _, value in n.values[stored_key]}
        out.append(c)
    return out


def _by_step(night: _Night, key: Key) -> dict[int, float]:
    stored = _stored_key(night, key)
    return {} if stored is None else {step: value for step, _, value in night.values[stored]}


def _routed(night: _Night, gates: Mapping[Key, Any]) -> tuple[dict, dict]:
    """The night's values and selection errors for each declaration (by metric and steps literal)."""
    values, errors = {}, {}
    for key in gates:
        stored = _stored_key(night, key)
        if stored is not None:
            values[key] = night.values[stored]
            continue
        error_key = same_literal(key, night.errors)
        if error_key is not None:
            errors[key] = night.errors[error_key]
    return values, errors


def _stored_key(night: _Night, key: Key) -> Key | None:
    return same_literal(key, night.values)


def _latest_mark(night: _Night) -> str | None:
    marks = night.run.provenance.get("marks") or []
    return marks[-1].get("status") if marks else None


def _run_trusted(night: _Night, trust: str) -> bool:
    if trust == "stored":
        return night.run.status == "trusted"
    mark = _latest_mark(night)
    return mark == "trusted" if mark is not None else night.trusted


def _outcome(night: _Night, key: Key, trust: str) -> Mapping[str, Any] | None:
    if trust == "stored":
        return night.run.outcomes.get(_json_key(key))
    return night.outcomes.get(key)


def _declaration_trusted(night: _Night, key: Key, trust: str) -> bool:
    if trust == "stored":
        return night_trusted(night.run.status, _latest_mark(night), night.run.outcomes.get(_json_key(key)))
    return night_trusted("trusted" if night.trusted else "untrusted", _latest_mark(night), night.outcomes.get(key))


def _json_key(key: Key) -> str:
    return json.dumps(list(key))


