"""The band maths live in ``bands``; ``evaluation`` keeps every name it had."""

from __future__ import annotations

import itertools
import math

import pytest

from airflow_metric_gate import bands, evaluation
from airflow_metric_gate.bands import median_and_mad, reference


@pytest.mark.parametrize(
    "name", ["Band", "band_limits", "compute_band", "constraint_params", "median_and_mad", "reference"]
)
def test_evaluation_re_exports_the_band_names(name: str) -> None:
    assert getattr(evaluation, name) is getattr(bands, name)
    assert name in evaluation.__all__


def test_an_overflowing_mean_says_so_in_both_modules() -> None:
    with pytest.raises(OverflowError, match=r"the sum of the 2 baseline value\(s\) is beyond the float range"):
        bands.reference([1e308, 1e308])
    assert evaluation.judge(1.0, [1e308, 1e308], (0.1, 0.0, 0.1, 0.0), 1)[2] == bands.overflow_message(2)


@pytest.mark.parametrize("values", [[-0.0, 0.0, 0.0], [0.0, -0.0], [-0.0, -0.0, 0.0, 0.0], [-1.0, -0.0, 0.0, 2.0],
                                    [0.0, -0.0, -0.0], [3.0, 0.0, -0.0, -5.0, 0.0]])
def test_a_median_of_signed_zeros_does_not_follow_the_order_of_the_values(values):
    """The store may return a baseline in any order: the median (and the MAD band's) take the same sign of zero."""
    medians = {repr(reference(list(order), "median")) for order in itertools.permutations(values)}
    bands = {repr(median_and_mad(list(order))) for order in itertools.permutations(values)}
    assert len(medians) == 1 and len(bands) == 1
    ordered = sorted(values, key=lambda v: (v, math.copysign(1.0, v)))  # -0.0 before 0.0
    mid = len(ordered) // 2
    expected = ordered[mid] if len(ordered) % 2 else (ordered[mid - 1] + ordered[mid]) / 2
    assert medians == {repr(expected)}
