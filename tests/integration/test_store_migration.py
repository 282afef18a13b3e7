"""Schema migrations upgrade an existing store in place, keeping its rows (store/schema.py)."""

from __future__ import annotations

from datetime import datetime, timezone

import pytest

from airflow_metric_gate.store import RunRow, ValueRow, open_store
from airflow_metric_gate.store.schema import (
    RUN_KEY_MONTH_SHIFT,
    SCHEMA_VERSION,
    SCHEMA_VERSION_TABLE,
    migration_statements,
    run_key_month,
)

COORD = ("m", '"all"', '{"rel_down":1,"rel_up":1}')


def _run(run_id, day):
    return RunRow(run_id=run_id, series="s", backend="cuda", suite="default", role="baseline", status="trusted",
                  logical_date=datetime(2026, 11, day, tzinfo=timezone.utc))


def _create_v1(store):
    """A store as version 1 of the package left it."""
    with store._transaction(schema=False) as cur:
        for statement in migration_statements(1, store.dialect):
            store._execute(cur, statement)
        store._execute(cur, f"INSERT INTO {SCHEMA_VERSION_TABLE} (version, upgraded_at) VALUES (1, %s)",
                       (store._ts(datetime.now(timezone.utc)),))


def test_a_version_1_store_is_upgraded_in_place_and_then_holds_64_bit_steps(store_url):
    assert SCHEMA_VERSION >= 2
    with open_store(store_url) as store:
        _create_v1(store)
        # write a run and a value as version 1 did (its columns only)
        with store._transaction(schema=False) as cur:
            store._execute(cur, "INSERT INTO runs (run_id, series, backend, suite, role, status, logical_date, "
                           "created_at, updated_at, rebaseline) VALUES ('old', 's', 'cuda', 'default', 'baseline', "
                           "'trusted', %s, %s, %s, %s)", (*[store._ts(datetime(2026, 1, 1, tzinfo=timezone.utc))] * 3,
                                                         store._bool(False)))
            store._execute(cur, "INSERT INTO metric_values (run_id, metric_key, steps_key, constraint_key, step, "
                           "value, at_step, ordinal) VALUES ('old', %s, %s, %s, 7, 0.5, 7, 0)", COORD)
    with open_store(store_url) as store:
        assert store.schema_version() == 1
        assert store.upgrade() == (1, SCHEMA_VERSION)
        assert store.history("m", series="s")[0]["step"] == 7  # the old row is kept
        old = store.get_run("old")
        assert (old.status, old.outcomes) == ("trusted", {})  # its status kept; no outcomes before version 4
        big = [2**31, 2**62, 2**63 - 1]
        store.write_run(_run("new", 2), [ValueRow(i, *COORD, s, 1.0, s) for i, s in enumerate(big)])
        rows = store.history("m", series="s")
        assert sorted(r["step"] for r in rows) == [7, *big]
        assert sorted(r["at_step"] for r in rows) == [7, *big]
        assert store.upgrade() == (SCHEMA_VERSION, SCHEMA_VERSION)


@pytest.mark.postgres
def test_postgres_step_columns_are_bigint(pg_url):
    with open_store(pg_url) as store:
        store.upgrade()
        with store._transaction() as cur:
            cur.execute("SELECT column_name, data_type FROM information_schema.columns "
                        "WHERE table_name = 'metric_values' AND column_name IN ('step', 'at_step') "
                        "ORDER BY column_name")
            assert cur.fetchall() == [("at_step", "bigint"), ("step", "bigint")]


def _create_at(store, version):
    """A store as version ``version`` of the package left it."""
    with store._transaction(schema=False) as cur:
        now = store._ts(datetime.now(timezone.utc))
        for v in range(1, version + 1):
            for statement in migration_statements(v, store.dialect):
                store._execute(cur, statement)
            store._execute(cur, f"INSERT INTO {SCHEMA_VERSION_TABLE} (version, upgraded_at) VALUES (%s, %s)", (v, now))


def _insert_value(store, cur, version, run_id, coord, step, value, at_step, ordinal):
    """One value of a stored run, as the schema at ``version`` keeps it."""
    if version < 6:
        store._execute(cur, "INSERT INTO metric_values (run_id, metric_key, steps_key, constraint_key, step, value, "
                       "at_step, ordinal) VALUES (%s, %s, %s, %s, %s, %s, %s, %s)",
                       (run_id, *coord, step, value, at_step, ordinal))
        return
    store._execute(cur, "UPDATE runs SET run_key = (SELECT COALESCE(MAX(run_key), 0) + 1 FROM runs) "
                   "WHERE run_id = %s AND run_key IS NULL", (run_id,))
    store._execute(cur, "INSERT INTO declarations (metric_key, steps_key, constraint_key) VALUES (%s, %s, %s) "
                   "ON CONFLICT DO NOTHING", coord)
    store._execute(cur, "INSERT INTO coordinates (declaration, step) SELECT declaration, %s FROM declarations "
                   "WHERE metric_key = %s AND steps_key = %s AND constraint_key = %s ON CONFLICT DO NOTHING",
                   (step, *coord))
    where = ("FROM runs r, coordinates c JOIN declarations d ON d.declaration = c.declaration WHERE r.run_id = %s "
             "AND d.metric_key = %s AND d.steps_key = %s AND d.constraint_key = %s AND c.step = %s")
    store._execute(cur, f"INSERT INTO metric_points (run_key, coordinate, value, at_step) SELECT r.run_key, "
                   f"c.coordinate, %s, %s {where}",
                   (value, None if at_step == step else -1 if at_step is None else at_step, run_id, *coord, step))
    store._execute(cur, f"INSERT INTO run_blocks (run_key, coordinate, ordinal, length, declaration) "
                   f"SELECT r.run_key, c.coordinate, %s, 1, c.declaration {where}", (ordinal, run_id, *coord, step))


@pytest.mark.parametrize("version", range(1, SCHEMA_VERSION))
def test_every_earlier_version_is_upgraded_with_its_runs_statuses_marks_and_values(store_url, version):
    day = datetime(2026, 1, 1, tzinfo=timezone.utc)
    with open_store(store_url) as store:
        _create_at(store, version)
        with store._transaction(schema=False) as cur:
            for n, (run_id, status) in enumerate((("a", "trusted"), ("b", "untrusted")), start=1):
                # PostgreSQL from version 7 on: a run's key is given, numbered within its month
                keyed = version >= 7 and store.dialect == "postgres"
                store._execute(
                    cur, "INSERT INTO runs (run_id, series, backend, suite, role, status, logical_date, created_at, "
                    f"updated_at, rebaseline, provenance, status_reason{', run_key' if keyed else ''}) VALUES (%s, "
                    f"'s', 'cuda', 'default', 'baseline', %s, %s, %s, %s, %s, %s, %s{', %s' if keyed else ''})",
                    (run_id, status, *[store._ts(day)] * 3, store._bool(run_id == "a"),
                     '{"marks": [{"status": "untrusted", "by": "x"}]}' if run_id == "b" else None, f"{status} note",
                     *([(run_key_month(day) << RUN_KEY_MONTH_SHIFT) + n] if keyed else [])))
                _insert_value(store, cur, version, run_id, COORD, 3, 0.25, 3, 0)
            if version >= 4:
                store._execute(cur, "UPDATE runs SET outcomes = %s WHERE run_id = 'a'", ('{"k": {"o": "pass"}}',))
    with open_store(store_url) as store:
        assert store.upgrade() == (version, SCHEMA_VERSION)
        a, b = store.get_run("a"), store.get_run("b")
        assert (a.status, a.status_reason, a.rebaseline) == ("trusted", "trusted note", True)
        assert (b.status, b.provenance["marks"][0]["status"], b.rebaseline) == ("untrusted", "untrusted", False)
        assert a.outcomes == ({"k": {"o": "pass"}} if version >= 4 else {})
        assert (a.write_version, b.write_version) == (0, 0)
        assert [(v.step, v.value, v.at_step) for v in store.run_values("a")] == [(3, 0.25, 3)]
        assert store.count("metric_values") == 2
        assert store.write_night(_run("a", 1), [ValueRow(0, *COORD, 3, 0.5, 3)]).write_version == 1


@pytest.mark.parametrize("version", range(1, 6))
def test_text_keyed_values_become_integer_keyed_with_their_order_and_stay_readable_by_name(store_url, version):
    """Version 6 moves every value to integer keys; each run keeps its values, steps and ordinals exactly."""
    day = datetime(2026, 1, 1, tzinfo=timezone.utc)
    other = ("n", "[5,1,3]", '{"rel_down":1,"rel_up":2}')
    # run a: m at steps 0..3, then n at listed steps 5, 1, 3 (ordinal 4 is a selection error: a gap)
    # run b: the declarations the other way round, m's steps written backwards
    rows = {
        "a": [(0, *COORD, 0, 1.0, 0), (1, *COORD, 1, 1.5, 1), (2, *COORD, 2, 2.0, 2), (3, *COORD, 3, 2.5, 3),
              (5, *other, 5, 9.0, 5), (6, *other, 1, 8.0, 1), (7, *other, 3, 7.0, 3)],
        "b": [(0, *other, 1, 6.0, 1), (1, *other, 3, 5.0, None), (2, *COORD, 3, 0.5, 3), (3, *COORD, 2, 0.25, 2),
              (4, *COORD, 9, 0.125, 9)],
    }
    with open_store(store_url) as store:
        _create_at(store, version)
        with store._transaction(schema=False) as cur:
            for i, (run_id, values) in enumerate(rows.items()):
                store._execute(
                    cur, "INSERT INTO runs (run_id, series, backend, suite, role, status, logical_date, created_at, "
                    "updated_at, rebaseline) VALUES (%s, 's', 'cuda', 'default', 'baseline', 'trusted', "
                    "%s, %s, %s, %s)",
                    (run_id, store._ts(day.replace(day=1 + i)), store._ts(day), store._ts(day), store._bool(False)))
                for ordinal, m, st, c, step, value, at in values:
                    store._execute(cur, "INSERT INTO metric_values (run_id, metric_key, steps_key, constraint_key, "
                                   "step, value, at_step, ordinal) VALUES (%s, %s, %s, %s, %s, %s, %s, %s)",
                                   (run_id, m, st, c, step, value, at, ordinal))
    with open_store(store_url) as store:
        assert store.upgrade() == (version, SCHEMA_VERSION)
        for run_id, values in rows.items():
            assert store.run_values(run_id) == [ValueRow(*v) for v in values]
        assert store.count("metric_values") == 12
        with store._transaction() as cur:  # the view names every coordinate, as the table did
            store._execute(cur, "SELECT run_id, ordinal, metric_key, steps_key, constraint_key, step, value, at_step "
                           "FROM metric_values ORDER BY run_id, ordinal")
            assert [tuple(r) for r in cur.fetchall()] == [(run_id, *v) for run_id, vs in rows.items() for v in vs]
        # b's baseline at each of its coordinates is a's value there (a has no m at step 9)
        _, history = store.run_values_and_baselines("b", 20)
        assert history == {0: [8.0], 1: [7.0], 2: [2.5], 3: [2.0]}
        assert store.write_night(_run("a", 1), [ValueRow(*v) for v in rows["a"]]).rows == 7
        assert store.run_values("a") == [ValueRow(*v) for v in rows["a"]]


@pytest.mark.postgres
def test_a_client_that_waited_for_another_clients_first_upgrade_sees_the_new_schema(pg_url):
    """Two clients open an empty store at once (two series' first night): the one that waits must not migrate again.

    The waiting client looked for the schema table before the other created it; once the other commits, the
    waiting client must see the table it did not see, not its own earlier "no such table".
    """
    import threading
    import time

    import psycopg2

    from airflow_metric_gate.store.postgres import _ADVISORY_LOCK_KEY

    first = psycopg2.connect(pg_url)
    waiting: dict = {}
    try:
        with first.cursor() as cur:
            cur.execute("SELECT pg_advisory_xact_lock(%s)", (_ADVISORY_LOCK_KEY,))  # the first client's upgrade

            def second_client():
                try:
                    with open_store(pg_url) as store:
                        waiting["result"] = store.upgrade()
                except Exception as exc:  # noqa: BLE001 - reported by the assertion below
                    waiting["error"] = exc

            thread = threading.Thread(target=second_client)
            thread.start()
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline:  # until the second client waits for the lock
                cur.execute("SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted")
                if cur.fetchone()[0]:
                    break
                time.sleep(0.05)
            else:
                pytest.fail("the second client never waited for the schema lock")
            for version in range(1, SCHEMA_VERSION + 1):
                for statement in migration_statements(version, "postgres"):
                    cur.execute(statement)
                cur.execute(f"INSERT INTO {SCHEMA_VERSION_TABLE} (version, upgraded_at) VALUES (%s, now())", (version,))
        first.commit()
        thread.join(60)
    finally:
        first.close()
    assert "error" not in waiting, f"the waiting client failed: {waiting.get('error')}"
    assert waiting["result"] == (SCHEMA_VERSION, SCHEMA_VERSION)
