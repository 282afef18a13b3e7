"""Step selection (SPEC 5): one regression test per rule."""

from __future__ import annotations

import json
import math

import pytest

from airflow_metric_gate.declarations import DeclarationError, declare
from airflow_metric_gate.records import read_record
from airflow_metric_gate.selection import LAST_STEP, select_steps

C = {"rel_up": 0.5, "rel_down": 0.5}


def _record(tmp_path, *lines):
    path = tmp_path / "record.jsonl"
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    return read_record(path)


def _one(record, steps):
    (selection,) = select_steps(record, [declare("m", steps=steps, constraint=C)])
    return selection


def test_last_stores_step_minus_one_and_keeps_real_step(tmp_path):
    rec = _record(tmp_path, {"metric": "m", "series": [[0, 0.1], [7, 0.7], [8, "x"], [9, None], [10, True]]})
    selection = _one(rec, "last")
    assert selection.error is None
    assert selection.points == [(LAST_STEP, 0.7, 7)]


def test_last_ignores_earlier_nan_but_not_a_non_finite_last(tmp_path):
    rec = _record(tmp_path, {"metric": "m", "series": [[0, "NaN"], [1, 0.5]]})
    assert _one(rec, "last").points == [(-1, 0.5, 1)]
    rec = _record(tmp_path, {"metric": "m", "series": [[0, 0.5], [1, "Infinity"]]})
    selection = _one(rec, "last")
    assert selection.points == [] and "not finite" in selection.error


def test_all_selects_every_numeric_point_in_series_order(tmp_path):
    rec = _record(tmp_path, {"metric": "m", "series": [[0, 0.2], [1, "skip"], [2, 0.6], [3, False], [4, 1]]})
    selection = _one(rec, "all")
    assert selection.points == [(0, 0.2, 0), (2, 0.6, 2), (4, 1.0, 4)]
    assert all(type(p[1]) is float for p in selection.points)


@pytest.mark.parametrize(
    ("series", "message"),
    [
        ([[0, 0.1], [None, 0.2]], "no step"),
        ([[0, 0.1], [0, 0.2]], "more than once"),
        ([[0, 0.1], [1, "NaN"]], "not finite"),
        ([[0, 0.1], [1, "-Infinity"]], "not finite"),
    ],
)
def test_all_errors(tmp_path, series, message):
    selection = _one(_record(tmp_path, {"metric": "m", "series": series}), "all")
    assert selection.points == []
    assert message in selection.error


def test_list_selects_listed_steps_in_listed_order(tmp_path):
    rec = _record(tmp_path, {"metric": "m", "series": [[0, 0.0], [1, 0.1], [2, 0.2], [3, 0.3]]})
    assert _one(rec, [3, 1]).points == [(3, 0.3, 3), (1, 0.1, 1)]


@pytest.mark.parametrize(
    ("series", "steps", "message"),
    [
        ([[0, 0.1], [0, 0.2], [1, 0.3]], [1], "more than once"),
        ([[0, 0.1]], [0, 5], "5 missing"),
        ([[0, 0.1], [1, "NaN"]], [0, 1], "not finite"),
        ([[0, 0.1], [1, "text"]], [1], 'listed step 1: its value "text"'),
    ],
)
def test_list_errors(tmp_path, series, steps, message):
    selection = _one(_record(tmp_path, {"metric": "m", "series": series}), steps)
    assert selection.points == []
    assert message in selection.error


def test_absent_metric_and_no_numeric_point_are_errors(tmp_path):
    rec = _record(tmp_path, {"metric": "m", "series": [[0, "x"], [1, None]]}, {"metric": "other", "series": []})
    assert "no numeric point" in _one(rec, "all").error
    (selection,) = select_steps(rec, [declare("absent", steps="all", constraint=C)])
    assert "absent from the record" in selection.error


def test_a_coordinate_declared_twice_is_selected_once(tmp_path):
    rec = _record(tmp_path, {"metric": "m", "series": [[0, 0.1]]})
    (selection,) = select_steps(rec, [declare("m", steps="all", constraint=C), declare("m", steps="all", constraint=C)])
    assert selection.values == [0.1]
    with pytest.raises(DeclarationError, match="declared twice with different enforce"):
        select_steps(rec, [declare("m", steps="all", constraint=C), declare("m", steps="all", constraint=C,
                                                                             enforce=True)])


def test_same_metric_with_other_literal_is_another_coordinate(tmp_path):
    rec = _record(tmp_path, {"metric": "m", "series": [[0, 0.1], [1, 0.2]]})
    selections = select_steps(rec, [declare("m", steps=[0, 1], constraint=C), declare("m", steps=[1, 0], constraint=C)])
    assert [s.points for s in selections] == [[(0, 0.1, 0), (1, 0.2, 1)], [(1, 0.2, 1), (0, 0.1, 0)]]
    assert selections[0].declaration.steps_key != selections[1].declaration.steps_key
    assert not math.isnan(selections[0].points[0][1])
