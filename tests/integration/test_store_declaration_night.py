"""``declaration_night`` and ``iter_values_and_baselines``: a night's values and their history, on both stores.

PostgreSQL sends a night that has every one of tonight's coordinates as its values alone (paired with
tonight's steps in coordinate order) and reads a night that lacks some again with its coordinates: both
kinds of night, and nights with steps tonight lacks, must come back value for value.
"""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import psycopg2
import pytest

from airflow_metric_gate.store import RunRow, ValueRow
from airflow_metric_gate.store.sql import float8_values

KEY = ("train/loss", '"all"', '{"rel_down":0.1,"rel_up":0.1}')
OTHER = ("eval/accuracy", '"all"', '{"rel_down":0.1,"rel_up":0.1}')
T0 = datetime(2026, 1, 1, tzinfo=timezone.utc)


def _night(store, n, steps, *, other_steps=()):
    run = RunRow(run_id=f"n{n}", series="s", backend="cuda", suite="default", role="baseline", status="trusted",
                 logical_date=T0 + timedelta(days=n))
    rows = [ValueRow(i, *KEY, step, 100.0 * n + step + 0.25, step) for i, step in enumerate(steps)]
    rows += [ValueRow(len(rows) + i, *OTHER, step, -1.0, step) for i, step in enumerate(other_steps)]
    store.write_run(run, rows)
    return {step: 100.0 * n + step + 0.25 for step in steps}


def test_each_night_comes_back_by_step_whatever_steps_it_has(store):
    full = _night(store, 0, range(40), other_steps=range(5))
    gappy = _night(store, 1, [s for s in range(40) if s % 7], other_steps=range(5))
    more = _night(store, 2, range(60))  # steps tonight lacks
    reordered = _night(store, 3, list(range(39, -1, -1)))  # the same steps logged in the other order
    _night(store, 4, [])  # nothing of this declaration
    _night(store, 5, range(40), other_steps=range(5))  # tonight
    current, found = store.declaration_night("n5", KEY, ["n0", "n1", "n2", "n3", "n4", "missing"])
    assert [(step, value) for step, _, value, _ in current] == [(s, 500.0 + s + 0.25) for s in range(40)]
    assert [ordinal for _, _, _, ordinal in current] == list(range(40)) and {at for _, at, _, _ in current} == set(
        range(40))
    assert found["n0"] == full and found["n1"] == gappy and found["n3"] == reordered
    assert found["n2"] == {s: v for s, v in more.items() if s < 40}
    assert set(found) == {"n0", "n1", "n2", "n3"}


def test_a_declaration_in_several_ranges_and_chunks_comes_back_whole(store, monkeypatch):
    """Steps added on a later night get coordinates after another declaration's: two ranges, one chunk each."""
    from airflow_metric_gate.store import value_reads

    monkeypatch.setattr(value_reads, "_RANGES_PER_CHUNK", 1)
    first = _night(store, 0, range(20), other_steps=range(5))  # lacks the second range entirely
    gappy = _night(store, 1, [s for s in range(30) if s not in (3, 25)])  # gaps in both ranges
    whole = _night(store, 2, range(30))
    _night(store, 3, range(30))
    current, found = store.declaration_night("n3", KEY, ["n0", "n1", "n2"])
    assert [step for step, _, _, _ in current] == list(range(30))
    assert found == {"n0": first, "n1": gappy, "n2": whole}


@pytest.mark.postgres
def test_float8_arrays_in_binary_form_read_back_as_the_very_floats(pg_url):
    values = [0.0, -0.0, 5e-324, 1.7976931348623157e308, -1.5, 1 / 3, 2.0 ** -1074 * 3, 123456.789]
    with psycopg2.connect(pg_url) as conn, conn.cursor() as cur:
        literal = "{" + ",".join(repr(v) for v in values) + "}"  # float8's own input: -0 stays -0
        cur.execute("SELECT array_send(%s::float8[]), %s::float8[]", (literal, literal))
        blob, text = cur.fetchone()
        assert [repr(v) for v in float8_values(blob).tolist()] == [repr(v) for v in text] == [repr(v) for v in values]
        cur.execute("SELECT array_send('{}'::float8[])")
        assert float8_values(cur.fetchone()[0]).tolist() == []
        for wrong in ("ARRAY[1.0, NULL]::float8[]", "ARRAY[[1.0], [2.0]]::float8[]", "ARRAY[1, 2]::int8[]"):
            cur.execute(f"SELECT array_send({wrong})")
            with pytest.raises(ValueError):
                float8_values(cur.fetchone()[0])


@pytest.mark.postgres
def test_each_night_comes_back_by_step_through_psycopg_3(pg_url):
    """The binary arrays through a psycopg 3 connection (an Airflow hook may hand one): ``bytes``, not a view."""
    psycopg = pytest.importorskip("psycopg")
    from airflow_metric_gate.store.postgres import PostgresStore

    with PostgresStore(lambda: psycopg.connect(pg_url)) as store:
        full = _night(store, 0, range(40))
        gappy = _night(store, 1, [s for s in range(40) if s % 7])
        _night(store, 2, range(40))
        _, found = store.declaration_night("n2", KEY, ["n0", "n1"])
        assert found == {"n0": full, "n1": gappy}


@pytest.mark.parametrize("chunk", [1, 3, 7, 1000])
def test_values_and_baselines_come_in_ordinal_order_whatever_the_coordinates_order(store, chunk):
    """Tonight lists the declarations in the other order than the night that made their coordinates."""
    for n, order in ((0, (OTHER, KEY)), (1, (OTHER, KEY)), (2, (KEY, OTHER))):
        run = RunRow(run_id=f"n{n}", series="s", backend="cuda", suite="default", role="baseline",
                     status="trusted", logical_date=T0 + timedelta(days=n))
        rows = [ValueRow(i * 5 + s, *key, s, 10.0 * n + i + s / 10, s) for i, key in enumerate(order) for s in range(5)]
        store.write_run(run, rows)
    current, history = store.run_values_and_baselines("n2", 20)
    streamed = list(store.iter_values_and_baselines("n2", 20, chunk=chunk))
    assert [(key, step, value, ordinal) for key, step, _, value, ordinal, _ in streamed] == [
        ((v.metric_key, v.steps_key, v.constraint_key), v.step, v.value, v.ordinal) for v in current]
    assert [ordinal for *_, ordinal, _ in streamed] == list(range(10))
    assert [sorted(baseline) for *_, baseline in streamed] == [sorted(history[v.ordinal]) for v in current]
    assert streamed[0][0] == KEY and streamed[0][5] and len(streamed[0][5]) == 2


@pytest.mark.postgres
@pytest.mark.parametrize("ranges_per_chunk", [1, 64])
def test_whole_nights_come_as_one_array_each_sharing_their_steps(pg_url, monkeypatch, ranges_per_chunk):
    """PostgreSQL: a night with every coordinate is one array (over every chunk); one that lacks some, a dict."""
    from airflow_metric_gate.step_values import StepValues
    from airflow_metric_gate.store import value_reads
    from airflow_metric_gate.store.postgres import PostgresStore

    monkeypatch.setattr(value_reads, "_RANGES_PER_CHUNK", ranges_per_chunk)
    with PostgresStore.from_url(pg_url) as store:
        _night(store, 0, range(20), other_steps=range(5))
        whole = _night(store, 1, range(30))  # two ranges: steps 20-29 have coordinates after the other's
        again = _night(store, 2, list(range(29, -1, -1)))
        gappy = _night(store, 3, [s for s in range(30) if s != 25])
        _night(store, 4, range(30))
        _, found = store.declaration_night("n4", KEY, ["n1", "n2", "n3"])
    assert isinstance(found["n1"], StepValues) and isinstance(found["n2"], StepValues)
    assert found["n1"].index is found["n2"].index and len(found["n1"]) == 30
    assert isinstance(found["n3"], dict)
    for name, expected in (("n1", whole), ("n2", again), ("n3", gappy)):
        assert sorted((s, repr(v)) for s, v in found[name].items()) == sorted((s, repr(v)) for s, v in expected.items())


@pytest.mark.parametrize("chunk", [1, 7, 1000])
def test_baselines_of_nights_with_gaps_are_each_coordinates_values(store, chunk):
    """The reference read: whole nights (one array each on PostgreSQL), nights with gaps and extra steps, none."""
    _night(store, 0, range(30), other_steps=range(5))
    _night(store, 1, [s for s in range(30) if s % 4])  # gaps
    _night(store, 2, range(45))  # steps tonight lacks
    _night(store, 3, [])  # nothing of this declaration
    _night(store, 4, list(range(29, -1, -1)), other_steps=range(3))  # another order
    _night(store, 5, range(30), other_steps=range(5))  # tonight
    current, history = store.run_values_and_baselines("n5", 20)
    streamed = list(store.iter_values_and_baselines("n5", 20, chunk=chunk))
    assert [(key, step, ordinal) for key, step, _, _, ordinal, _ in streamed] == [
        ((v.metric_key, v.steps_key, v.constraint_key), v.step, v.ordinal) for v in current]
    for (key, step, _, _, ordinal, baseline) in streamed:
        expected = sorted(repr(x) for x in history.get(ordinal, []))
        assert sorted(repr(x) for x in baseline) == expected
        if key == KEY:  # by hand: every night's value of this step, where the night has it
            by_hand = [100.0 * n + step + 0.25 for n in (0, 1, 2, 4) if n != 1 or step % 4]
            assert sorted(baseline) == sorted(by_hand)
        else:
            assert sorted(baseline) == [-1.0] * (2 if step < 3 else 1)
