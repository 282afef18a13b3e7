"""The calibrated policy's matrix path gives the very decisions of its step-by-step path.

``judge_declaration`` works out its per-step statistics on a nights x steps matrix; the
step-by-step path it replaced is kept (``_columns_plain``, ``_deviations_plain``) and switched on
here to judge the same random nights both ways: every outcome, result, float, report and stored
entry must be the same (compared by ``repr``, so a float differing in its last bit, a ``-0.0`` or
a NaN in the wrong place shows).
"""

from __future__ import annotations

import math
import random

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from airflow_metric_gate.decision import calibrated
from airflow_metric_gate.decision.calibrated import Candidate, HistoryChoice, judge_declaration
from airflow_metric_gate.step_values import StepIndex, StepValues

KEY = ("train/loss", '"all"', '{"rel_down":0.1,"rel_up":0.1}')


def _gate(rng: random.Random) -> dict:
    steps_key = rng.choice(['"all"', '"last"', "[0,1,2]"])
    return {"metric_key": KEY[0], "steps_key": steps_key, "constraint_key": KEY[2],
            "constraint": {"rel_up": rng.choice([0.0, 0.1, 0.5]), "abs_floor_up": 0.0,
                           "rel_down": rng.choice([0.0, 0.1]), "abs_floor_down": 0.0},
            "enforce": True, "allowlist_reason": None, "policy": "calibrated",
            "direction": rng.choice(["up", "down", "both"])}


def _value(rng: random.Random, kind: str, level: float) -> float:
    if kind == "ties":  # a few distinct values: medians, MADs and leave-one-out ranks tie
        return level * rng.choice([1.0, 2.0, 2.0, 3.0])
    if kind == "flat":  # most nights agree exactly: the MAD is 0
        return level if rng.random() < 0.8 else level * (1.0 + rng.gauss(0.0, 0.1))
    if kind == "signed":  # zeros and negative values: the linear scale
        return rng.choice([0.0, -0.0, rng.gauss(0.0, 1.0), -abs(rng.gauss(0.0, 3.0))])
    if kind == "odd":  # not finite now and then: the step-by-step path takes over
        return rng.choice([math.nan, math.inf, -math.inf]) if rng.random() < 0.05 else level + rng.gauss(0.0, 1.0)
    return level * math.exp(rng.gauss(0.0, 0.05))  # positive: the log scale


def _case(seed: int):
    rng = random.Random(seed)
    steps = rng.choice([1, 2, 5, 12, 25, 60])
    nights = rng.choice([1, 1, 2, 4, 5, 6, 9, 15, 30])
    kind = rng.choice(["ties", "flat", "signed", "odd", "positive", "positive"])
    level = rng.choice([1.0, 1e-6, 250.0])
    gap = rng.choice([0.0, 0.1, 0.5])  # share of a night's steps it lacks
    history = []
    for j in range(nights):
        values = {s: _value(rng, kind, level) for s in range(steps) if rng.random() >= gap}
        if rng.random() < 0.1:  # a step tonight does not have
            values[steps + 3] = level
        if rng.random() < 0.05:
            values = {}
        outcome = rng.choice([{"o": "pass", "z": rng.gauss(0, 1), "zn": rng.gauss(0, 1), "level": 0.0}, {"o": "pass"}])
        history.append(Candidate(f"r{j}", f"2026-01-{j + 1:02d}", True, outcome, values))
    shift = rng.choice([1.0, 1.0, 1.3, 0.7, 10.0])
    tonight = []
    for s in range(steps):
        if rng.random() < 0.1:
            continue  # tonight lacks a step
        v = _value(rng, "positive" if kind == "odd" else kind, level) * shift
        tonight.append((s, s if rng.random() < 0.5 else None, v if math.isfinite(v) else level))
    return _gate(rng), tonight, HistoryChoice(history, [])


def _decide(seed: int, vectorised: bool, monkeypatch) -> str:
    gate, tonight, choice = _case(seed)
    monkeypatch.setattr(calibrated, "_VECTORISED", vectorised)
    try:
        d = judge_declaration(KEY, gate, tonight, choice, run_id="tonight", logical_date="2026-02-01",
                              min_history=calibrated.CALIBRATION_MIN)
    except ValueError as error:  # a history that is not finite may stop either path: the same way
        return repr(error)
    return repr((d.outcome, d.results, d.stored, d.report))


@settings(max_examples=400, deadline=None)
@given(seed=st.integers(min_value=0, max_value=2**32 - 1))
def test_matrix_path_decides_as_step_by_step(seed):
    with pytest.MonkeyPatch.context() as monkeypatch:
        assert _decide(seed, True, monkeypatch) == _decide(seed, False, monkeypatch)


def test_cases_cover_what_they_mean_to():
    """The random cases reach the night test, the log and linear scales, ties and one trusted night."""
    seen = set()
    for seed in range(300):
        gate, tonight, choice = _case(seed)
        try:
            d = judge_declaration(KEY, gate, tonight, choice, run_id="tonight", logical_date="2026-02-01")
        except ValueError:  # a history with infinities
            continue
        seen.add(d.outcome)
        seen.add(d.report.get("scale"))
        seen.add(("nights", min(len(choice.history), 2)))
    assert {"pass", "fail", "inactive", "log", "linear", ("nights", 1)} <= seen


def test_matrix_stands_aside_for_values_not_finite_or_negative_zero():
    steps = [0, 1]
    fine = [Candidate("a", "2026-01-01", True, None, {0: 1.0, 1: 2.0})]
    assert calibrated._Matrix.of(steps, fine) is not None
    for odd in (math.nan, math.inf, -0.0):
        history = [*fine, Candidate("b", "2026-01-02", True, None, {0: odd, 1: 2.0})]
        assert calibrated._Matrix.of(steps, history) is None


def _as_arrays(choice: HistoryChoice, seed: int) -> HistoryChoice:
    """The same nights as the store reads whole ones: one array each, steps in another order, shared per step set."""
    rng = random.Random(seed)
    indexes: dict[frozenset, StepIndex] = {}
    nights = []
    for c in choice.history:
        if not c.values:
            nights.append(c)
            continue
        steps = frozenset(c.values)
        if steps not in indexes:
            order = sorted(steps)
            rng.shuffle(order)  # coordinate order need not be step order
            indexes[steps] = StepIndex(order)
        index = indexes[steps]
        array = np.array([c.values[s] for s in index.steps], dtype=float)
        nights.append(Candidate(c.run_id, c.logical_date, c.trusted, c.outcome, StepValues(index, array)))
    return HistoryChoice(nights, [])


@settings(max_examples=300, deadline=None)
@given(seed=st.integers(min_value=0, max_value=2**32 - 1))
def test_nights_read_as_arrays_decide_as_nights_read_as_dicts(seed):
    gate, tonight, choice = _case(seed)
    arrays = _as_arrays(choice, seed)
    assert [repr(sorted(c.values.items())) for c in arrays.history] == [
        repr(sorted(c.values.items())) for c in choice.history]

    def decide(history: HistoryChoice) -> str:
        try:
            d = judge_declaration(KEY, gate, tonight, history, run_id="tonight", logical_date="2026-02-01",
                                  min_history=calibrated.CALIBRATION_MIN)
        except ValueError as error:
            return repr(error)
        return repr((d.outcome, d.results, d.stored, d.report))

    assert decide(arrays) == decide(choice)


def test_matrix_stands_aside_for_arrays_not_finite_or_negative_zero():
    index = StepIndex([1, 0])
    fine = [Candidate("a", "2026-01-01", True, None, StepValues(index, np.array([2.0, 1.0])))]
    matrix = calibrated._Matrix.of([0, 1, 5], fine)
    assert matrix is not None and repr(matrix.values.tolist()) == repr([[1.0, 2.0, math.nan]])
    for odd in (math.nan, math.inf, -0.0):
        history = [*fine, Candidate("b", "2026-01-02", True, None, StepValues(index, np.array([odd, 1.0])))]
        assert calibrated._Matrix.of([0, 1], history) is None
