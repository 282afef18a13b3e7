"""Band, statuses and FAIL explanations (SPEC 6), including its worked examples."""

from __future__ import annotations

import random
from collections import Counter

import pytest

from airflow_metric_gate.evaluation import (
    ERROR,
    FAIL,
    INACTIVE,
    PASS,
    compute_band,
    constraint_params,
    error_result,
    evaluate_value,
    is_trusted,
    judge,
    reference,
)


def _eval(current, history, constraint, **kw):
    return evaluate_value(metric_key="m", steps_key='"all"', constraint_key="{}", step=0, at_step=0,
                          current=current, history=history, constraint=constraint, **kw)


SYM_05 = {"rel_up": 0.5, "rel_down": 0.5, "abs_floor_up": 0.0, "abs_floor_down": 0.0}


def test_worked_example_ref_half_rel_half():
    assert _eval(0.74, [0.5], SYM_05).status == PASS
    result = _eval(0.76, [0.5], SYM_05)
    assert result.status == FAIL
    assert (result.side, result.bound) == ("above", "rel")


def test_worked_example_history_mean_fails_below():
    result = _eval(0.55, [0.80, 0.82, 0.78], {"rel_up": 0.2, "rel_down": 0.2})
    assert result.status == FAIL
    assert result.lo == pytest.approx(0.64)
    assert result.hi == pytest.approx(0.96)
    assert result.ref == pytest.approx(0.8)
    assert result.n == 3
    assert result.side == "below"
    assert result.bound == "rel"
    for piece in ("0.55", "below", "lo 0.64", "ref 0.8", "n=3"):
        assert piece in result.reason


@pytest.mark.parametrize(
    ("ref", "constraint", "lo", "hi"),
    [
        (2.0, {"rel_up": 0.1, "rel_down": 0.8}, 0.4, 2.2),
        (0.6, {"rel_up": 0.5, "rel_down": 0.1}, 0.54, 0.90),
    ],
)
def test_worked_example_bands(ref, constraint, lo, hi):
    band = compute_band(ref, constraint)
    assert band.lo == pytest.approx(lo)
    assert band.hi == pytest.approx(hi)


def test_band_ends_are_inclusive():
    band = compute_band(0.5, SYM_05)
    assert band.hi == 0.75 and band.lo == 0.25
    assert _eval(0.75, [0.5], SYM_05).status == PASS
    assert _eval(0.25, [0.5], SYM_05).status == PASS


def test_band_scales_from_absolute_ref_for_negative_values():
    band = compute_band(-2.0, {"rel_up": 0.1, "rel_down": 0.1})
    assert band.lo == pytest.approx(-2.2)
    assert band.hi == pytest.approx(-1.8)


def test_absolute_floor_sets_side_when_larger_and_is_named():
    # ref 0.01: rel term 0.005 is below the floor 0.1, so the floor decides.
    constraint = {"rel_up": 0.5, "abs_floor_up": 0.1, "rel_down": 0.5, "abs_floor_down": 0.1}
    result = _eval(0.2, [0.01], constraint)
    assert result.status == FAIL
    assert (result.side, result.bound) == ("above", "abs_floor")
    assert result.hi == pytest.approx(0.11)
    assert "abs_floor 0.1" in result.reason


def test_zero_ref_with_floor_only_band():
    result = _eval(0.0, [0.0, 0.0], {"rel_up": 1.0, "abs_floor_up": 0.1, "rel_down": 1.0})
    assert result.status == PASS
    assert (result.lo, result.hi) == (0.0, 0.1)


def test_cold_start_is_inactive_with_null_band():
    result = _eval(123.0, [], SYM_05)
    assert result.status == INACTIVE
    assert result.ref is None and result.lo is None and result.hi is None
    assert result.n == 0


def test_min_history_makes_short_history_inactive():
    assert _eval(0.5, [0.5, 0.5], SYM_05, min_history=3).status == INACTIVE
    assert _eval(0.5, [0.5, 0.5, 0.5], SYM_05, min_history=3).status == PASS


def test_median_reference_is_selectable():
    history = [1.0, 1.0, 10.0]
    assert reference(history, "mean") == pytest.approx(4.0)
    assert reference(history, "median") == 1.0
    assert _eval(1.1, history, {"rel_up": 0.2, "rel_down": 0.2}, aggregate="median").status == PASS
    assert _eval(1.1, history, {"rel_up": 0.2, "rel_down": 0.2}).status == FAIL


def test_mean_does_not_depend_on_value_order():
    values = [0.1] * 10 + [1e16, -1e16]
    assert reference(values) == reference(list(reversed(values)))


def test_unknown_aggregate_is_rejected():
    with pytest.raises(ValueError, match="aggregate"):
        reference([1.0], "mode")


def test_trust_requires_every_result_pass_or_inactive():
    ok = _eval(0.5, [0.5], SYM_05)
    cold = _eval(0.5, [], SYM_05)
    bad = _eval(9.0, [0.5], SYM_05)
    err = error_result("m", '"all"', "{}", "metric 'm' is absent from the record")

    def counts(*results):
        return Counter(r.status for r in results)

    assert is_trusted(counts(ok, cold))
    assert is_trusted(counts())
    assert is_trusted({PASS: 3, INACTIVE: 1, FAIL: 0, ERROR: 0})
    assert not is_trusted(counts(ok, bad))
    assert not is_trusted(counts(ok, err))
    assert err.status == ERROR and err.step is None and err.n == 0 and err.current is None


def test_no_history_is_inactive_even_with_min_history_zero():
    result = _eval(0.5, [], SYM_05, min_history=0)
    assert result.status == INACTIVE and result.ref is None


def test_the_result_explains_what_judge_decided():
    rng = random.Random(3)
    statuses = set()
    for _ in range(2000):
        history = [rng.uniform(-2, 2) for _ in range(rng.randint(0, 4))]
        constraint = {"rel_up": rng.choice([0, 0.1, 0.5]), "abs_floor_up": rng.choice([0, 0.05]),
                      "rel_down": rng.choice([0, 0.2, 0.8]), "abs_floor_down": rng.choice([0, 0.1])}
        current = rng.uniform(-3, 3)
        min_history = rng.randint(0, 2)
        status, ref, error, mad = judge(current, history, constraint_params(constraint), min_history)
        result = _eval(current, history, constraint, min_history=min_history)
        assert (result.status, result.ref, error, mad) == (status, ref, None, None)
        if status == PASS:
            assert result.lo <= current <= result.hi and result.side is None
        elif status == FAIL:
            assert result.side == ("above" if current > result.hi else "below")
            assert not result.lo <= current <= result.hi
        else:
            assert status == INACTIVE and ref is None and len(history) < max(min_history, 1)
        statuses.add(status)
    assert statuses == {PASS, FAIL, INACTIVE}


def test_a_baseline_sum_beyond_the_float_range_is_an_error_result():
    status, ref, error, mad = judge(1.0, [1.7e308, 1.7e308], constraint_params(SYM_05), 1)
    assert (status, ref) == (ERROR, None) and "beyond the float range" in error
    result = _eval(1.0, [1.7e308, 1.7e308], SYM_05)
    assert (result.status, result.n, result.ref, result.reason) == (ERROR, 2, None, error)


def test_cold_start_comes_before_an_overflowing_baseline():
    assert judge(1.0, [1.7e308, 1.7e308], constraint_params(SYM_05), 3) == (INACTIVE, None, None, None)
