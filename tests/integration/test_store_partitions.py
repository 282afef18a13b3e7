"""The values are partitioned by month on PostgreSQL, and pruning drops whole months (issue 19, item 7).

Schema version 7 keeps each run's values in the partition of its logical date's month (the month
is the run key's high bits).  A prune that removes every night of a month drops that month's
partition; a month that keeps some nights has its removed nights' rows deleted.
"""

from __future__ import annotations

import json
import threading
from datetime import datetime, timezone

import pytest

from airflow_metric_gate.cli import EXIT_OK, main
from airflow_metric_gate.store import RunRow, ValueRow, open_store
from airflow_metric_gate.store.schema import (
    POINTS_INDEX,
    RUN_KEY_MONTH_SHIFT,
    SCHEMA_VERSION,
    SCHEMA_VERSION_TABLE,
    migration_statements,
    run_key_month,
)

pytestmark = pytest.mark.postgres

COORD = ("m", '"all"', '{"rel_down":0.2,"rel_up":0.2}')
#: Nights in four months, one of them before 2000 (kept under the first month, January 2000).
NIGHTS = {"old": datetime(1999, 6, 1, tzinfo=timezone.utc),
          "jan-1": datetime(2026, 1, 5, tzinfo=timezone.utc), "jan-2": datetime(2026, 1, 31, 23, tzinfo=timezone.utc),
          "feb-1": datetime(2026, 2, 1, tzinfo=timezone.utc), "feb-2": datetime(2026, 2, 20, tzinfo=timezone.utc),
          "mar-1": datetime(2026, 3, 3, tzinfo=timezone.utc)}
MONTHS = {"old": "2000_01", "jan": "2026_01", "feb": "2026_02", "mar": "2026_03"}


def _run(run_id, when):
    return RunRow(run_id=run_id, series="s", backend="cuda", suite="default", role="baseline", status="trusted",
                  logical_date=when)


def _values(n, value=1.0):
    return [ValueRow(i, *COORD, i, value, i) for i in range(n)]


def _partitions(store):
    with store._transaction() as cur:
        cur.execute("SELECT c.relname FROM pg_inherits i "
                    "JOIN pg_class c ON c.oid = i.inhrelid WHERE i.inhparent = 'metric_points'::regclass "
                    "ORDER BY c.relname")
        return [row[0] for row in cur.fetchall()]


def _run_keys(store):
    with store._transaction() as cur:
        cur.execute("SELECT run_id, run_key FROM runs ORDER BY run_id")
        return dict(cur.fetchall())


def _month_of(key):
    year, month = divmod(key >> RUN_KEY_MONTH_SHIFT, 12)
    return f"{2000 + year:04d}_{month + 1:02d}"


def test_each_night_goes_to_its_months_partition_and_a_rewrite_keeps_its_key(pg_url):
    with open_store(pg_url) as store:
        for run_id, when in NIGHTS.items():
            store.write_run(_run(run_id, when), _values(4))
        keys = _run_keys(store)
        assert {r: _month_of(k) for r, k in keys.items()} == {r: MONTHS[r.split("-")[0]] for r in NIGHTS}
        assert len(set(keys.values())) == len(NIGHTS)
        assert _partitions(store) == [*(f"metric_points_{m}" for m in sorted(MONTHS.values())), "metric_points_other"]
        with store._transaction() as cur:  # each value sits in its own month's partition
            cur.execute("SELECT tableoid::regclass::text, run_key FROM metric_points")
            assert {(table, _month_of(key)) for table, key in cur.fetchall()} == {
                (f"metric_points_{m}", m) for m in MONTHS.values()}
        store.write_run(_run("feb-1", NIGHTS["feb-1"]), _values(4, 2.0))  # a retry of one night
        assert _run_keys(store) == keys
        assert [v.value for v in store.run_values("feb-1")] == [2.0] * 4
        assert store.count("metric_values") == 4 * len(NIGHTS)


def test_prune_drops_the_months_it_empties_and_deletes_rows_of_the_others(capsys, pg_url):
    with open_store(pg_url) as store:
        for run_id, when in NIGHTS.items():
            store.write_run(_run(run_id, when), _values(4))
    # before 2026-02-10: "old", both January nights and feb-1 go; February keeps feb-2
    argv = ["prune", "--store", pg_url, "--json", "--before", "2026-02-10", "--force"]
    assert main([*argv, "--dry-run"]) == EXIT_OK
    dry = json.loads(capsys.readouterr().out)
    assert dry["partitions_dropped"] == ["metric_points_2000_01", "metric_points_2026_01"]
    assert (dry["nights"], dry["values"]) == (4, 16)
    with open_store(pg_url) as store:
        assert len(_partitions(store)) == 5  # a dry run drops nothing (four months and the default)
    assert main(argv) == EXIT_OK
    result = json.loads(capsys.readouterr().out)
    assert (result["nights"], result["values"], result["partitions_dropped"]) == (4, 16, dry["partitions_dropped"])
    with open_store(pg_url) as store:
        assert _partitions(store) == ["metric_points_2026_02", "metric_points_2026_03", "metric_points_other"]
        assert sorted(_run_keys(store)) == ["feb-2", "mar-1"]
        assert store.count("metric_values") == 8
        assert [v.value for v in store.run_values("feb-2")] == [1.0] * 4
        # a night of a dropped month can be written again: its partition comes back
        store.write_run(_run("jan-1", NIGHTS["jan-1"]), _values(2))
        assert "metric_points_2026_01" in _partitions(store)
        assert len(store.run_values("jan-1")) == 2


def _migrate(cur, version):
    """Make the store's schema as version ``version`` of the package left it."""
    for v in range(1, version + 1):
        for statement in migration_statements(v, "postgres"):
            cur.execute(statement)
        cur.execute(f"INSERT INTO {SCHEMA_VERSION_TABLE} (version, upgraded_at) VALUES (%s, now())", (v,))


def _old_nights(cur, steps, key_of):
    """Store the nights of ``NIGHTS`` by hand, as versions 6 and 7 kept them: one declaration of ``steps`` steps.

    The n-th night (from 1) gets the run key ``key_of(n, logical_date)`` and the values n + step.
    """
    cur.execute("INSERT INTO declarations (metric_key, steps_key, constraint_key) VALUES (%s, %s, %s)", COORD)
    cur.execute("INSERT INTO coordinates (declaration, step) SELECT 1, s FROM generate_series(0, %s) s", (steps - 1,))
    for n, (run_id, when) in enumerate(NIGHTS.items(), start=1):
        key = key_of(n, when)
        cur.execute("INSERT INTO runs (run_id, series, backend, suite, role, status, logical_date, created_at, "
                    "updated_at, rebaseline, run_key) VALUES (%s, 's', 'cuda', 'default', 'baseline', 'trusted', "
                    "%s, now(), now(), false, %s)", (run_id, when, key))
        cur.execute("INSERT INTO metric_points SELECT %s, coordinate, %s + step, NULL FROM coordinates",
                    (key, float(n)))
        cur.execute("INSERT INTO run_blocks VALUES (%s, 1, 0, %s, 1)", (key, steps))


def test_a_version_6_store_is_renumbered_by_month_with_every_value_kept(pg_url):
    with open_store(pg_url) as store:
        with store._transaction(schema=False) as cur:
            _migrate(cur, 6)
        assert store.schema_version() == 6
        # a store at version 6 as that version wrote it: consecutive run keys, one table of values
        store._schema_ready = True
        with store._transaction() as cur:
            _old_nights(cur, 3, lambda n, when: n)
        before = {run_id: [(v.step, v.value) for v in store.run_values(run_id)] for run_id in NIGHTS}
        store._schema_ready = False
        assert store.upgrade() == (6, SCHEMA_VERSION)
        keys = _run_keys(store)
        assert {r: _month_of(k) for r, k in keys.items()} == {r: MONTHS[r.split("-")[0]] for r in NIGHTS}
        assert {run_id: [(v.step, v.value) for v in store.run_values(run_id)] for run_id in NIGHTS} == before
        assert _partitions(store) == [*(f"metric_points_{m}" for m in sorted(MONTHS.values())), "metric_points_other"]
        # new nights after the upgrade get keys of their own month, never one already taken
        store.write_run(_run("jan-3", datetime(2026, 1, 20, tzinfo=timezone.utc)), _values(3))
        new = _run_keys(store)["jan-3"]
        assert _month_of(new) == "2026_01" and new not in keys.values()


def _indexes(store):
    """Each table of ``metric_points`` (the parent and its partitions) -> its indexes' definitions."""
    with store._transaction() as cur:
        cur.execute("SELECT t.relname, pg_get_indexdef(x.indexrelid) FROM pg_index x "
                    "JOIN pg_class t ON t.oid = x.indrelid WHERE t.relname LIKE 'metric_points%%' ORDER BY 1, 2")
        found: dict[str, list[str]] = {}
        for table, definition in cur.fetchall():
            found.setdefault(table, []).append(definition.split(" USING ", 1)[1])
        return found


def test_a_version_7_store_trades_its_primary_key_for_the_group_index_keeping_every_value(pg_url):
    """Version 8: the months' partitions, the default one and one a version 7 writer attached all change."""
    with open_store(pg_url) as store:
        with store._transaction(schema=False) as cur:
            _migrate(cur, 7)
            # a month's partition as a version 7 writer made it: a table with its own key, then attached
            cur.execute('CREATE TABLE "metric_points_2026_02" (run_key INTEGER NOT NULL, coordinate INTEGER NOT '
                        'NULL, value DOUBLE PRECISION NOT NULL, at_step BIGINT, CONSTRAINT '
                        '"metric_points_2026_02_pkey" PRIMARY KEY (run_key, coordinate))')
            feb = run_key_month(NIGHTS["feb-1"])
            cur.execute("ALTER TABLE metric_points ATTACH PARTITION metric_points_2026_02 FOR VALUES FROM (%s) TO (%s)",
                        (feb << RUN_KEY_MONTH_SHIFT, (feb + 1) << RUN_KEY_MONTH_SHIFT))
            # keyed by month (version 7); all but February's nights go to the default partition
            _old_nights(cur, 100, lambda n, when: (run_key_month(when) << RUN_KEY_MONTH_SHIFT) + n)
        assert store.schema_version() == 7
        store._schema_ready = True  # read them as they are
        before = {run_id: [(v.step, v.value) for v in store.run_values(run_id)] for run_id in NIGHTS}
        assert all(len(values) == 100 for values in before.values())
        store._schema_ready = False
        assert store.upgrade() == (7, SCHEMA_VERSION)
        assert {run_id: [(v.step, v.value) for v in store.run_values(run_id)] for run_id in NIGHTS} == before
        group_index = "btree (run_key, ((coordinate >> 6))) WITH (fillfactor='100')"
        assert _indexes(store) == {table: [group_index] for table in ("metric_points", *_partitions(store))}
        assert len(_indexes(store)) == 3  # the parent, February's partition and the default one
        with store._transaction() as cur:
            cur.execute("SELECT indexrelid::regclass::text FROM pg_index WHERE indrelid = 'metric_points'::regclass")
            assert cur.fetchall() == [(POINTS_INDEX,)]
        # a new month's partition gets its part of the index too, and a night reads back whole
        store.write_run(_run("apr-1", datetime(2026, 4, 9, tzinfo=timezone.utc)), _values(100, 2.5))
        assert [v.value for v in store.run_values("apr-1")] == [2.5] * 100
        assert _indexes(store)["metric_points_2026_04"] == [group_index]


def test_writers_of_many_series_in_one_new_month_each_get_a_key_of_their_own(pg_url):
    errors: list[BaseException] = []
    when = datetime(2026, 5, 1, tzinfo=timezone.utc)

    def writer(n):
        try:
            with open_store(pg_url) as store:
                for night in range(5):
                    store.write_run(RunRow(run_id=f"w{n}-{night}", series=f"s{n}", backend="cuda", suite="default",
                                           role="baseline", status="trusted", logical_date=when), _values(50))
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    with open_store(pg_url) as store:
        store.upgrade()
    threads = [threading.Thread(target=writer, args=(n,)) for n in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert not errors, errors
    with open_store(pg_url) as store:
        keys = _run_keys(store)
        assert len(keys) == 30 and len(set(keys.values())) == 30
        assert {_month_of(k) for k in keys.values()} == {"2026_05"}
        assert _partitions(store) == ["metric_points_2026_05", "metric_points_other"]
        assert store.count("metric_values") == 30 * 50


def test_a_night_past_the_last_month_shares_it(pg_url):
    with open_store(pg_url) as store:
        store.write_run(_run("far", datetime(2999, 1, 1, tzinfo=timezone.utc)), _values(3))
        assert _month_of(_run_keys(store)["far"]) == "2170_07"
        assert "metric_points_2170_07" in _partitions(store)
        assert len(store.run_values("far")) == 3


def test_a_role_that_cannot_make_partitions_writes_to_the_default_one(pg_url):
    """The owner upgrades; a writer with only the documented grants writes a new month's first night."""
    from urllib.parse import urlsplit, urlunsplit

    import psycopg2

    with open_store(pg_url) as store:
        store.write_run(_run("owner", NIGHTS["jan-1"]), _values(3))
    role = "mg_partition_writer"
    admin = psycopg2.connect(pg_url)
    admin.autocommit = True
    with admin.cursor() as cur:
        cur.execute(f"DROP OWNED BY {role}" if _role_exists(cur, role) else "SELECT 1")
        cur.execute(f"DROP ROLE IF EXISTS {role}")
        cur.execute(f"CREATE ROLE {role} LOGIN")
        cur.execute(f"GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA public TO {role}")
        cur.execute(f"GRANT USAGE ON ALL SEQUENCES IN SCHEMA public TO {role}")
    parts = urlsplit(pg_url)
    writer_url = urlunsplit((parts.scheme, f"{role}@{parts.hostname}:{parts.port or 5432}", parts.path, "", ""))
    try:
        with open_store(writer_url) as writer:
            writer.write_run(_run("writer", NIGHTS["mar-1"]), _values(3))  # March has no partition yet
            assert [v.value for v in writer.run_values("writer")] == [1.0] * 3
        with open_store(pg_url) as store:
            assert "metric_points_2026_03" not in _partitions(store)
            with store._transaction() as cur:
                cur.execute("SELECT DISTINCT tableoid::regclass::text FROM metric_points WHERE run_key = %s",
                            (_run_keys(store)["writer"],))
                assert cur.fetchall() == [("metric_points_other",)]
        # and prune removes it row by row
        assert main(["prune", "--store", pg_url, "--before", "2026-04-01", "--force"]) == EXIT_OK
        with open_store(pg_url) as store:
            assert store.count("metric_values") == 0
    finally:
        with admin.cursor() as cur:
            cur.execute(f"DROP OWNED BY {role}")
            cur.execute(f"DROP ROLE {role}")
        admin.close()


def _role_exists(cur, role):
    cur.execute("SELECT 1 FROM pg_roles WHERE rolname = %s", (role,))
    return cur.fetchone() is not None


def test_prune_waits_for_a_reader_of_several_months_instead_of_deadlocking(pg_url):
    """A reader inside a transaction reads over every month while prune drops one: both finish."""
    import psycopg2

    with open_store(pg_url) as store:
        for run_id, when in NIGHTS.items():
            store.write_run(_run(run_id, when), _values(4))
    reader = psycopg2.connect(pg_url)
    join = "SELECT COUNT(*) FROM metric_points p JOIN runs r ON r.run_key = p.run_key WHERE r.series = 's'"
    outcome: dict = {}
    try:
        feb = _run_keys(open_store(pg_url))["feb-2"]
        with reader.cursor() as cur:
            # one month's values first: the reader holds the table and February's partition, not January's
            cur.execute("SELECT COUNT(*) FROM metric_points WHERE run_key = %s", (feb,))
            assert cur.fetchone()[0] == 4

            def prune():
                try:
                    outcome["code"] = main(["prune", "--store", pg_url + "?lock_timeout=20s", "--before",
                                            "2026-02-01", "--force", "--json"])
                except BaseException as exc:  # noqa: BLE001 - reported below
                    outcome["error"] = exc

            thread = threading.Thread(target=prune)
            thread.start()
            thread.join(1.0)  # prune now waits for the reader's lock on the table
            cur.execute(join)  # then the reader reads every month, January's too
            assert cur.fetchone()[0] == 4 * len(NIGHTS)
        reader.commit()
        thread.join(30)
    finally:
        reader.close()
    assert "error" not in outcome and outcome.get("code") == EXIT_OK, outcome
    with open_store(pg_url) as store:
        assert sorted(_run_keys(store)) == ["feb-1", "feb-2", "mar-1"]
        assert "metric_points_2026_01" not in _partitions(store)


def test_the_public_view_reaches_one_value_of_a_run_by_its_group(pg_url):
    """``metric_values`` joins a value with its coordinate by group too (version 8): a night's value is one lookup."""
    with open_store(pg_url) as store:
        for run_id in ("jan-1", "jan-2"):
            store.write_run(_run(run_id, NIGHTS[run_id]), _values(20_000))
        with store._transaction() as cur:
            for table in ("runs", "metric_points", "coordinates", "declarations", "run_blocks"):
                cur.execute(f"ANALYZE {table}")
            cur.execute("EXPLAIN (COSTS OFF) SELECT value FROM metric_values WHERE run_id = 'jan-1' "
                        "AND metric_key = 'm' AND step = 700")
            plan = "\n".join(row[0] for row in cur.fetchall())
            cur.execute("SELECT step, value FROM metric_values WHERE run_id = 'jan-1' AND metric_key = 'm' "
                        "AND step = 700")
            assert cur.fetchall() == [(700, 1.0)]
    assert "Index Cond: ((run_key = r.run_key) AND ((coordinate >> 6) = (c.coordinate >> 6)))" in plan, plan
