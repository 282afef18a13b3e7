"""A stored value takes at most 64 bytes on PostgreSQL, indexes included (issue 19, item 1).

Sizes are counted, not timed: ``pg_total_relation_size`` of every table of the store (each
partition of ``metric_points`` included), as ``benchmarks/storage.py`` measures them.  The values'
own table is checked at a few nights (its share does not depend on the count of nights); the
whole store once the coordinates, stored once, are shared by 30 nights.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.postgres, pytest.mark.slow]

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
from storage import bytes_per_value  # noqa: E402


def test_values_take_at_most_52_bytes_and_the_whole_store_at_most_64_a_value(pg_url):
    sizes = bytes_per_value(pg_url, 10_000, [5, 30])
    at_5, at_30 = sizes
    for row in sizes:
        points = row["tables"]["metric_points"] / row["values"]
        # a heap row of 44 bytes with its line pointer, about 6.4 of index: no index entry per row
        assert points <= 52, row
    assert at_30["values"] == 300_000 and at_30["bytes_per_value"] <= 64, at_30
    assert at_5["bytes_per_value"] > at_30["bytes_per_value"]  # the coordinates' share falls as nights add up
