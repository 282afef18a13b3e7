"""The band maths live in ``bands``; ``evaluation`` keeps every name it had."""

from __future__ import annotations

import pytest

from airflow_metric_gate import bands, evaluation


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
