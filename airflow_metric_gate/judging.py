"""Judging one run: its results, status counts and trust, decided in one place.

:func:`airflow_metric_gate.pipeline.evaluate` and :func:`airflow_metric_gate.replay.replay` both
judge a run through :func:`judge_run`: each coordinate against its baseline values
(:func:`~airflow_metric_gate.evaluation.judge`), then the opt-in persistence rule
(:func:`~airflow_metric_gate.rules.tolerate_isolated_failures`), then the whole-night results
(:func:`~airflow_metric_gate.evaluation.judge_night`), then the declarations that selected nothing,
and finally the run's trust (:func:`~airflow_metric_gate.evaluation.is_trusted`).  They differ
only in where the baselines come from: the store's read for one run, or replay's rolling windows.
"""

from __future__ import annotations

import heapq
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from airflow_metric_gate.decision.calibrated import Decision, HistoryChoice, judge_declaration
from airflow_metric_gate.decision.policy import TRUSTING_OUTCOMES
from airflow_metric_gate.enums import ERROR, FAIL, PASS, STATUSES
from airflow_metric_gate.evaluation import (
    NIGHT_BOUND,
    Result,
    constraint_params,
    describe,
    error_result,
    is_trusted,
    judge,
    judge_night,
    night_result,
    step_z,
)
from airflow_metric_gate.rules import (
    applies_persistence,
    mad_k,
    min_failing_steps,
    night_mean_k,
    tolerate_isolated_failures,
)
from airflow_metric_gate.verdict import DISTANCE_MAX, DISTANCE_TINY

__all__ = ["CalibratedJudgement", "Key", "KeptResults", "RunJudgement", "judge_calibrated", "judge_run",
           "merge_judgements", "outcome_of", "step_fail_distance"]

#: A declaration's coordinate keys: ``(metric_key, steps_key, constraint_key)``.
Key = tuple[str, str, str]


@dataclass
class RunJudgement:
    """What :func:`judge_run` decided for one run.

    :param counts: how many results of each status the run has.
    :param per_declaration: the same counts per declaration (every declaration given, zeros included).
    :param results: ``(order, result, declaration)`` in ``order``; FAIL and ERROR results, and
        every other one when asked for (``all_results``).
    :param trusted: no result is FAIL or ERROR.
    """

    counts: dict[str, int]
    per_declaration: dict[Key, dict[str, int]]
    results: list[tuple[int, Result, Mapping[str, Any]]]
    trusted: bool


def judge_run(
    values: Iterable[tuple[Key, int, int | None, float, int, Sequence[float]]],
    declarations: Mapping[Key, Mapping[str, Any]],
    errors: Iterable[tuple[Key, int, str]] = (),
    *,
    min_history: int,
    aggregate: str,
    all_results: bool = False,
    keep: int | None = None,
) -> RunJudgement:
    """Judge one run's values against their baselines, with the run's declarations.

    :param values: ``(key, step, at_step, value, order, baseline)`` for each of the run's values:
        its declaration's keys, the stored step, the real step, the value, where its result sorts
        (the ordinal), and the coordinate's baseline values.  Each key must be in ``declarations``.
    :param declarations: each declaration as stored with a run
        (:func:`~airflow_metric_gate.rules.declaration_summary`), by its keys.
    :param errors: ``(key, order, message)`` for each declaration that selected nothing.
    :param min_history: fewer baseline values make a coordinate INACTIVE.
    :param aggregate: ``mean`` or ``median``.
    :param all_results: keep every result, not only FAIL and ERROR.
    :param keep: without ``all_results``: keep at most this many step FAILs and ERRORs of each
        declaration, those the verdict can show (see :class:`KeptResults`), instead of all of them;
        ``None`` keeps all.
    """
    counts = {status: 0 for status in STATUSES}
    per_gate = {key: {status: 0 for status in STATUSES} for key in declarations}
    # per declaration: its constraint as a tuple, its mad band (None: off), its whole-night rule (None: off)
    # and its counts; looked up once per value
    rules = {key: (constraint_params(d["constraint"]), mad_k(d), night_mean_k(d), per_gate[key])
             for key, d in declarations.items()}
    night_zs: dict[Key, list[float]] = {}  # the whole-night rule's robust z of each step, per declaration
    night_at: dict[Key, int] = {}  # where a declaration's whole-night result sorts: after its last value
    ordered: list[tuple[int, Result, Mapping[str, Any]]] = []
    kept: KeptResults | None = None
    if keep is not None and not all_results:
        # the persistence rule turns a declaration's FAILs PASS one by one when it has fewer than its
        # min_failing_steps: it must find them all
        if applies_persistence(declarations.values()):
            keep = max([keep, *(min_failing_steps(d) for d in declarations.values())])
        kept = KeptResults(keep)
    last_key = None
    for key, step, at_step, value, order, baseline in values:
        if key is not last_key:  # a declaration's values usually come together: look it up once for them
            params, band_k, night_k, gate_counts = rules[key]
            last_key = key
        judged = judge(value, baseline, params, min_history, aggregate, band_k)
        status = judged[0]
        gate_counts[status] += 1  # the run's counts are their sums, taken below
        if night_k is not None:
            night_at[key] = order
            z = step_z(value, baseline, judged)
            if z is not None:
                night_zs.setdefault(key, []).append(z)
        if status in (FAIL, ERROR) or all_results:
            gate = declarations[key]
            result = describe(key[0], key[1], key[2], step, at_step, value, len(baseline), judged,
                              gate["constraint"], min_history, aggregate, band_k)
            if kept is None:
                ordered.append((order, result, gate))
            else:
                kept.add(key, order, result, gate)
    if kept is not None:
        ordered = kept.items()
    for gate_counts in per_gate.values():
        for status, n in gate_counts.items():
            counts[status] += n
    if applies_persistence(declarations.values()):  # the opt-in rule min_failing_steps
        selected = Counter({key: sum(c.values()) for key, c in per_gate.items()})
        ordered = tolerate_isolated_failures(
            ordered, counts, selected, keep_tolerated=all_results, per_declaration=per_gate,
            fails=None if kept is None else Counter({key: c[FAIL] for key, c in per_gate.items() if c[FAIL]}))
    for key, zs in night_zs.items():  # after persistence: a whole night's FAIL is never tolerated
        night_k = rules[key][2]
        night = judge_night(zs, night_k)  # type: ignore[arg-type]  # night_zs: only declarations with a night_k
        if night is not None and night[0] == FAIL:  # only a failing night adds a result
            counts[FAIL] += 1
            per_gate[key][FAIL] += 1
            ordered.append((night_at[key], night_result(*key, zs, night, night_k), declarations[key]))  # type: ignore[arg-type]  # as above
    for key, order, message in errors:
        counts[ERROR] += 1
        per_gate[key][ERROR] += 1
        ordered.append((order, error_result(*key, message), declarations[key]))
    ordered.sort(key=lambda item: item[0])
    return RunJudgement(counts, per_gate, ordered, is_trusted(counts))


def step_fail_distance(result: Result) -> float:
    """Return how far a step's FAIL lies outside its band, as the verdict's summary reckons it.

    :param result: a FAIL result of a step (it has ``current``, ``ref``, ``lo``, ``hi`` and ``side``).
    """
    scale = abs(result.ref)  # type: ignore[arg-type]  # a step FAIL has current, ref, lo and hi
    if scale < DISTANCE_TINY:
        scale = DISTANCE_TINY
    if result.side == "above":
        distance = (result.current - result.hi) / scale  # type: ignore[operator]  # as above
    else:
        distance = (result.lo - result.current) / scale  # type: ignore[operator]  # as above
    return min(distance, DISTANCE_MAX)


class KeptResults:
    """The FAIL and ERROR results of a run's steps that a verdict can need, bounded per declaration.

    A verdict lists at most ``max_results`` results, the FAILs by distance (ties in order), then the
    ERRORs in order, and summarizes each declaration from all its results.  So of each declaration
    it keeps the ``limit`` FAILs of largest distance and its first ``limit`` ERRORs (a superset of
    those listed), and the FAILs that set its summary: the first in order, those at its smallest and
    largest step, the first above and the first below its band.  The verdict built from them is the
    verdict built from every result; the counts are taken apart from them.

    :param limit: results of each kind to keep per declaration (at least one is kept).
    """

    def __init__(self, limit: int) -> None:
        self.limit = max(1, limit)  # one at least: a declaration's summary names its first ERROR
        self._fails: dict[Key, list[tuple[float, int, int, Result, Mapping[str, Any]]]] = {}
        self._errors: dict[Key, list[tuple[int, Result, Mapping[str, Any]]]] = {}
        self._marks: dict[Key, dict[str, tuple[int, Result, Mapping[str, Any], int | None]]] = {}

    def add(self, key: Key, order: int, result: Result, gate: Mapping[str, Any]) -> None:
        """Take one FAIL or ERROR result of a step.

        :param key: its declaration's keys.
        :param order: where it sorts (its ordinal).
        :param result: the result.
        :param gate: its declaration as stored with the run.
        """
        if result.status == ERROR:
            errors = self._errors.setdefault(key, [])
            if len(errors) < self.limit:
                errors.append((order, result, gate))
            return
        heap = self._fails.setdefault(key, [])
        # the smallest entry is the one to drop: the least distance, and on a tie the latest in order
        entry = (step_fail_distance(result), -order, order, result, gate)
        if len(heap) < self.limit:
            heapq.heappush(heap, entry)
        elif heap and entry[:2] > heap[0][:2]:
            heapq.heapreplace(heap, entry)
        marks = self._marks.setdefault(key, {})
        step = result.at_step if result.step == -1 else result.step
        if "first" not in marks:
            marks["first"] = (order, result, gate, step)
        if step is not None:
            if "low" not in marks or step < marks["low"][3]:  # type: ignore[operator]  # a kept step is an int
                marks["low"] = (order, result, gate, step)
            if "high" not in marks or step > marks["high"][3]:  # type: ignore[operator]  # as above
                marks["high"] = (order, result, gate, step)
        side = "above" if result.side == "above" else "below"
        if side not in marks:
            marks[side] = (order, result, gate, step)

    def items(self) -> list[tuple[int, Result, Mapping[str, Any]]]:
        """Return the kept results as ``(order, result, declaration)``, in order."""
        found: dict[int, tuple[int, Result, Mapping[str, Any]]] = {}
        for heap in self._fails.values():
            for _, _, order, result, gate in heap:
                found[order] = (order, result, gate)
        for marks in self._marks.values():
            for order, result, gate, _ in marks.values():
                found[order] = (order, result, gate)
        for errors in self._errors.values():
            for order, result, gate in errors:
                found[order] = (order, result, gate)
        return [found[order] for order in sorted(found)]


def outcome_of(counts: Mapping[str, int]) -> str:
    """Return a reference declaration's night outcome from its counts: ``error``, ``fail``, ``inactive`` or ``pass``.

    :param counts: the declaration's results counted by status.
    """
    if counts.get(ERROR):
        return "error"
    if counts.get(FAIL):
        return "fail"
    if counts.get(PASS):
        return "pass"
    return "inactive"


@dataclass
class CalibratedJudgement:
    """What :func:`judge_calibrated` decided for the calibrated declarations of one run.

    :param judgement: counts, results and trust, as :func:`judge_run` gives them.
    :param decisions: each declaration's :class:`~airflow_metric_gate.decision.calibrated.Decision`.
    """

    judgement: RunJudgement
    decisions: dict[Key, Decision]


def judge_calibrated(
    values: Mapping[Key, Sequence[tuple[int, int | None, float, int]]],
    declarations: Mapping[Key, Mapping[str, Any]],
    errors: Iterable[tuple[Key, int, str]],
    choices: Mapping[Key, HistoryChoice],
    *,
    run_id: str,
    logical_date: str,
    min_history: int,
    all_results: bool = False,
    keep: int | None = None,
) -> CalibratedJudgement:
    """Judge the calibrated declarations of one run, each against the history chosen for it.

    :param values: ``(step, at_step, value, order)`` of each declaration's values, by its keys.
    :param declarations: the calibrated declarations as stored with the run, by their keys.
    :param errors: ``(key, order, message)`` for each declaration that selected nothing.
    :param choices: each declaration's history (:func:`~airflow_metric_gate.decision.calibrated.choose_history`).
    :param run_id: the run's store run id.
    :param logical_date: the run's logical date (ISO 8601).
    :param min_history: trusted nights the night test needs (at least
        :data:`~airflow_metric_gate.decision.calibrated.CALIBRATION_MIN`).
    :param all_results: keep every result, not only FAIL and ERROR.
    :param keep: without ``all_results``: keep of each declaration's step FAILs and ERRORs only
        those a verdict of at most this many results can show (:class:`KeptResults`); its night
        results are always kept.  ``None`` keeps all.
    """
    counts = {status: 0 for status in STATUSES}
    per_gate = {key: {status: 0 for status in STATUSES} for key in declarations}
    ordered: list[tuple[int, Result, Mapping[str, Any]]] = []
    kept = KeptResults(keep) if keep is not None and not all_results else None
    later: list[tuple[int, int, Result, Mapping[str, Any]]] = []  # with ``kept``: the results not ranked
    decisions: dict[Key, Decision] = {}
    failed = {key for key, _, _ in errors}
    for key, order, message in errors:
        counts[ERROR] += 1
        per_gate[key][ERROR] += 1
        ordered.append((order, error_result(*key, message), declarations[key]))
        decisions[key] = Decision("error", [], {"o": "error", "cause": f"{key[0]}: {message}"}, {})
    for key, gate in declarations.items():
        if key in failed:
            continue
        rows = values.get(key, ())
        decision = judge_declaration(key, gate, [(s, a, v) for s, a, v, _ in rows], choices[key], run_id=run_id,
                                     logical_date=logical_date, min_history=min_history)
        decisions[key] = decision
        last = rows[-1][3] if rows else 0
        orders = [o for _, _, _, o in rows]
        for i, result in enumerate(decision.results):
            status = result.status
            counts[status] += 1
            per_gate[key][status] += 1
            if status in (FAIL, ERROR) or all_results or result.bound == "improvement":
                own = i < len(orders) and result.step is not None  # placed at its own value, else after the last
                order = orders[i] if own else last
                if kept is not None and own and _step_result(result):
                    kept.add(key, order, result, gate)
                elif kept is not None:
                    later.append((order, 0 if own else 1, result, gate))
                else:
                    ordered.append((order, result, gate))
    if kept is not None:
        # as the whole list sorts: a result placed after a declaration's last value follows that value's
        later += [(order, 0, result, gate) for order, result, gate in kept.items()]
        later.sort(key=lambda item: item[:2])
        ordered += [(order, result, gate) for order, _, result, gate in later]
    ordered.sort(key=lambda item: item[0])
    trusted = all(d.outcome in TRUSTING_OUTCOMES for d in decisions.values())
    return CalibratedJudgement(RunJudgement(counts, per_gate, ordered, trusted), decisions)


def _step_result(result: Result) -> bool:
    """Whether a calibrated result is a step's FAIL or ERROR with its band (what :class:`KeptResults` ranks)."""
    if result.status == ERROR:
        return result.step is not None
    # a step's FAIL (a blow-up's included) has its band; the night's own results have no step
    return (result.status == FAIL and result.step is not None and result.bound != NIGHT_BOUND
            and None not in (result.current, result.ref, result.lo, result.hi))


def merge_judgements(*parts: RunJudgement) -> RunJudgement:
    """Return the judgement of a run whose declarations were judged in parts (two policies, or one by one).

    The results are sorted by their order once; on a tie they keep the order of the parts (a
    stable sort), as merging the parts two by two would.

    :param parts: the judgements of the parts (at least one), in order.
    """
    counts = {status: sum(part.counts.get(status, 0) for part in parts) for status in STATUSES}
    results = sorted([item for part in parts for item in part.results], key=lambda item: item[0])
    per_declaration = {key: value for part in parts for key, value in part.per_declaration.items()}
    return RunJudgement(counts, per_declaration, results, all(part.trusted for part in parts))
