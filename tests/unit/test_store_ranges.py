"""Coordinate ranges as the store's statements bind them (``store.sql``): joined, grouped, counted."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from airflow_metric_gate.store.sql import (
    GROUP_BITS,
    RANGE_PARAMS,
    baseline_params,
    baseline_sql,
    in_ranges,
    joined_ranges,
    night_arrays_params,
    night_arrays_sql,
    ranges_params,
    run_values_sql,
)

_ranges = st.lists(st.tuples(st.integers(0, 300), st.integers(0, 40)).map(lambda r: (r[0], r[0] + r[1])),
                   max_size=8)


@settings(max_examples=300, deadline=None)
@given(_ranges)
def test_joined_ranges_cover_the_same_coordinates_with_none_touching(ranges):
    joined = joined_ranges(ranges)
    covered = {c for lo, hi in ranges for c in range(lo, hi + 1)}
    assert {c for lo, hi in joined for c in range(lo, hi + 1)} == covered
    assert all(a[1] + 1 < b[0] for a, b in zip(joined, joined[1:]))


def test_declarations_whose_blocks_follow_each_other_are_one_range():
    assert joined_ranges([(1000, 1999), (0, 999), (2000, 2000), (2005, 2010)]) == [(0, 2000), (2005, 2010)]


def test_each_range_names_its_groups_then_its_ends():
    assert ranges_params([(63, 64), (640, 700)]) == [0, 1, 63, 64, 10, 10, 640, 700]
    assert 640 >> GROUP_BITS == 10 and in_ranges("c", 0) == "" and ranges_params([]) == []


@given(st.integers(1, 5), st.integers(1, 4))
def test_every_statement_binds_as_many_parameters_as_it_has_placeholders(runs, ranges):
    bounds = [(i * 100, i * 100 + 50) for i in range(ranges)]
    assert in_ranges("c", ranges).count("%s") == RANGE_PARAMS * ranges == len(ranges_params(bounds))
    assert night_arrays_sql(runs, ranges).count("%s") == len(night_arrays_params(list(range(runs)), bounds))
    for sql in (baseline_sql(runs, ranges=ranges), run_values_sql(runs, ranges=ranges),
                run_values_sql(runs, ranges=ranges, by_run=True)):
        assert sql.count("%s") == len(baseline_params(list(range(runs)), 99, bounds))
