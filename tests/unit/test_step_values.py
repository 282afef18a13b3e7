"""A night's values read as one array: looked up by step as a ``dict`` of them would be."""

from __future__ import annotations

import math

import numpy as np
import pytest

from airflow_metric_gate.step_values import StepIndex, StepValues


def test_a_night_as_one_array_reads_as_a_mapping_by_step():
    index = StepIndex([30, 10, 20])
    night = StepValues(index, np.array([3.5, 1.0 / 3.0, -0.0]))
    assert dict(night) == {30: 3.5, 10: 1.0 / 3.0, 20: -0.0}
    assert night == {10: 1.0 / 3.0, 20: 0.0, 30: 3.5} and list(night) == [30, 10, 20] and len(night) == 3
    assert type(night[10]) is float and repr(night[20]) == "-0.0"
    assert 20 in night and 40 not in night and night.get(40) is None and night.get(40, 7.0) == 7.0
    with pytest.raises(KeyError):
        night[40]
    assert sorted(night.items()) == [(10, 1.0 / 3.0), (20, -0.0), (30, 3.5)]


def test_positions_take_tonights_steps_with_nan_for_those_the_night_lacks():
    index = StepIndex([30, 10, 20])
    night = StepValues(index, np.array([3.0, 1.0, 2.0]))
    at = index.positions([10, 20, 25, 30])
    assert at.tolist() == [1, 2, -1, 0]
    taken = night.taken(at)
    assert taken[:2].tolist() == [1.0, 2.0] and math.isnan(taken[2]) and taken[3] == 3.0
    assert night.values_array.tolist() == [3.0, 1.0, 2.0]  # taking copies: the night is unchanged
    empty = StepValues(StepIndex([]), np.empty(0))
    assert not empty and np.isnan(empty.taken(index.positions([1, 2]))).all()


def test_values_must_be_one_per_step():
    with pytest.raises(ValueError, match="expected 2 values, one per step"):
        StepValues(StepIndex([1, 2]), np.array([1.0, 2.0, 3.0]))


def test_items_and_values_come_from_the_array_in_step_order():
    night = StepValues(StepIndex([30, 10, 20]), np.array([3.5, 1.0, -0.0]))
    assert list(night.items()) == [(30, 3.5), (10, 1.0), (20, -0.0)] and repr(list(night.values())[2]) == "-0.0"
    assert all(type(v) is float for v in night.values())
    assert (10, 1.0) in night.items() and (10, 2.0) not in night.items()
    assert len(night.items()) == 3 and 1.0 in night.values()
