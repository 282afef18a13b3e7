"""A night's coordinates as ranges, and the coordinate it would hold twice (``store.writes.cover``).

On PostgreSQL the values' index is not unique (schema version 8): the write refuses a night that
gives one coordinate two values, chunk by chunk, from the ranges its chunks cover so far.
"""

from __future__ import annotations

from collections import Counter

from hypothesis import given, settings
from hypothesis import strategies as st

from airflow_metric_gate.store.writes import cover


def _blocks(spans):
    return [(start, ordinal, length, 1) for ordinal, (start, length) in enumerate(spans)]


def test_consecutive_blocks_merge_into_one_range_across_chunks():
    covered, repeated = cover([], _blocks([(10, 5), (0, 10)]))
    assert (covered, repeated) == ([(0, 15)], None)
    covered, repeated = cover(covered, _blocks([(15, 1), (20, 3)]))
    assert (covered, repeated) == ([(0, 16), (20, 23)], None)


def test_a_block_inside_an_earlier_chunks_range_is_the_repeat():
    covered, _ = cover([], _blocks([(0, 100)]))
    assert cover(covered, _blocks([(200, 5), (40, 1)]))[1] == 40


def test_two_blocks_of_one_chunk_that_overlap():
    assert cover([], _blocks([(5, 10), (0, 6)]))[1] == 5


@settings(max_examples=300, deadline=None)
@given(st.lists(st.lists(st.tuples(st.integers(0, 60), st.integers(1, 8)), max_size=6), max_size=6))
def test_a_repeat_is_found_exactly_when_some_coordinate_is_held_twice(chunks):
    held = Counter(c for chunk in chunks for start, length in chunk for c in range(start, start + length))
    covered: list[tuple[int, int]] = []
    found = None
    for chunk in chunks:
        covered, found = cover(covered, _blocks(chunk))
        if found is not None:
            break
    assert (found is not None) == any(n > 1 for n in held.values())
    if found is None:
        assert sorted(c for start, end in covered for c in range(start, end)) == sorted(held)
        assert all(a[1] < b[0] for a, b in zip(covered, covered[1:]))  # apart: touching ranges merge
    else:
        assert held[found] > 1
