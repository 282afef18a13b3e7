"""Chunks: batches of a stream, and a run's coordinates cut into chunks of ranges in ordinal order."""

from __future__ import annotations

from airflow_metric_gate.chunking import batched
from airflow_metric_gate.store.points import Ordinals
from airflow_metric_gate.store.value_reads import _chunk_ranges


def test_batched_keeps_every_item_in_order():
    assert list(batched(iter(range(7)), 3)) == [[0, 1, 2], [3, 4, 5], [6]]
    assert list(batched([], 3)) == []


def test_chunks_follow_ordinal_order_and_cut_long_blocks():
    # two declarations: 9 then 4 values, the second numbered before the first
    ordinals = Ordinals([(100, 0, 9, 1), (50, 9, 4, 2)])
    chunks = list(_chunk_ranges(ordinals, 4, 64))
    assert chunks == [[(100, 103, 1)], [(104, 107, 1)], [(108, 108, 1), (50, 52, 2)], [(53, 53, 2)]]
    covered = [c for chunk in chunks for lo, hi, _ in chunk for c in range(lo, hi + 1)]
    assert [ordinals.ordinal(c) for c in covered] == list(range(13))


def test_chunks_hold_at_most_so_many_ranges():
    ordinals = Ordinals([(10 * i, i, 1, 1) for i in range(5)])  # one value per block
    chunks = list(_chunk_ranges(ordinals, 100, 2))
    assert [len(c) for c in chunks] == [2, 2, 1]
