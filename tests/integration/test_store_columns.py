"""A night written from columns (``write_columns``) on both backends: the rows read back as given.

The store confirms a declaration's coordinates in one summary row when they are its steps numbered in
order (every night after the first) and reads them otherwise; each night here steps off that path
in another way, and the values must come back on their own steps either way.
"""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest

from airflow_metric_gate.store import RunRow, StoreInputError, ValueRow
from airflow_metric_gate.store.points import PointGroup

T0 = datetime(2026, 11, 1, tzinfo=timezone.utc)
A = ("loss", '"all"', '{"rel_up":0.5}')
B = ("reward", '"all"', '{"rel_up":0.5}')


def _run(run_id, day):
    return RunRow(run_id=run_id, series="s", backend="cuda", suite="nightly", role="baseline", status="trusted",
                  logical_date=T0 + timedelta(days=day), provenance={})


def _night(*declarations):
    """Groups and the rows they should read back as, from ``(keys, steps, at_steps or None)``."""
    groups, expected, ordinal = [], [], 0
    for keys, steps, at_steps in declarations:
        values = [round(0.25 * s + ordinal, 3) for s in steps]
        at = steps if at_steps is None else at_steps
        groups.append(PointGroup(keys, ordinal, steps, values, at))
        expected += [ValueRow(ordinal + i, *keys, s, v, a) for i, (s, v, a) in enumerate(zip(steps, values, at))]
        ordinal += len(steps)
    return groups, expected


NIGHTS = [
    ("first", ((A, list(range(0, 50, 5)), None), (B, [0, 1, 2], None))),
    ("same steps", ((A, list(range(0, 50, 5)), None), (B, [0, 1, 2], None))),
    ("a step fewer, within the range", ((A, [0, 5, 10, 20, 25, 30, 35, 40, 45], None), (B, [0, 1, 2], None))),
    ("the same steps in another order", ((A, list(range(45, -5, -5)), None), (B, [2, 0, 1], None))),
    ("new steps between and after", ((A, [0, 3, 5, 10, 15, 20, 25, 30, 35, 40, 45, 60], None), (B, [0, 1, 2], None))),
    ("the declarations swapped", ((B, [0, 1, 2], None), (A, list(range(0, 50, 5)), None))),
    ("a step named by another", ((A, [0, 5], [0, 7]), (B, [1, 2], None))),
]


@pytest.mark.parametrize("chunk", [None, 4])
def test_nights_read_back_as_written(store, chunk):
    for day, (name, declarations) in enumerate(NIGHTS):
        groups, expected = _night(*declarations)
        written = store.write_columns(_run(f"r{day}", day), groups, chunk=chunk)
        assert written.rows == len(expected), name
        assert store.run_values(f"r{day}") == expected, name
    for day, (name, declarations) in enumerate(NIGHTS):  # the later nights left the earlier ones alone
        assert store.run_values(f"r{day}") == _night(*declarations)[1], name


def test_columns_and_rows_store_the_same(store):
    groups, expected = _night((A, [0, 5, 10], None), (B, [3, 4], [3, 9]))
    store.write_night(_run("rows", 0), expected)
    store.write_columns(_run("columns", 1), groups)
    assert store.run_values("columns") == store.run_values("rows") == expected


def test_a_retry_replaces_the_night(store):
    groups, _ = _night((A, [0, 5, 10], None))
    first = store.write_columns(_run("r", 0), groups)
    groups, expected = _night((A, [0, 5], None), (B, [1], None))
    again = store.write_columns(_run("r", 0), groups)
    assert again.write_version == first.write_version + 1
    assert store.run_values("r") == expected
    assert store.count("metric_values") == len(expected)


def test_a_non_finite_value_writes_nothing(store):
    groups, _ = _night((A, [0, 5], None))
    groups[0].values[1] = float("nan")
    with pytest.raises(StoreInputError, match="non-finite"):
        store.write_columns(_run("r", 0), groups)
    assert store.count("runs") == 0


@pytest.mark.postgres
def test_nights_read_back_as_written_through_psycopg_3(pg_url):
    """The binary ``COPY`` of a night's rows through a psycopg 3 connection (an Airflow hook may hand one)."""
    psycopg = pytest.importorskip("psycopg")
    from airflow_metric_gate.store.postgres import PostgresStore

    with PostgresStore(lambda: psycopg.connect(pg_url)) as store:
        for day, (name, declarations) in enumerate(NIGHTS):
            groups, expected = _night(*declarations)
            assert store.write_columns(_run(f"r{day}", day), groups, chunk=4).rows == len(expected), name
            assert store.run_values(f"r{day}") == expected, name
