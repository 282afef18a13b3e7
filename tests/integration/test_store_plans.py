"""No statement of persist, evaluate or the UI reads the whole values table, even on stale statistics (issue 19).

The nightly pipeline never analyzes the tables before it reads them.  Here the statistics are taken
when the store held three nights (autovacuum off for its tables, so they stay that way) and then
many more nights are written: the planner believes a new night's run id has no rows at all.  Every
statement the store runs is explained, in its own transaction (so with the planner settings the
store gave it), before it runs.
"""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest

from airflow_metric_gate.declarations.resolution import declare
from airflow_metric_gate.pipeline import evaluate
from airflow_metric_gate.store import RunRow, ValueRow, open_store
from airflow_metric_gate.store.schema import month_partition, run_key_month

pytestmark = [pytest.mark.postgres, pytest.mark.slow]

GATES = [declare(f"m{i}", steps="all", constraint={"rel_up": 0.2, "rel_down": 0.2}) for i in range(4)]
CALIBRATED = declare("c", steps="all", constraint={"rel_up": 0.2, "rel_down": 0.2}, policy="calibrated")
PER_GATE = 1000
#: Every table of the store that grows with the nights or the coordinates.
TABLES = ("runs", "metric_points", "run_blocks", "coordinates", "declarations")
NIGHTS = 24


def _night(n: int, status: str = "trusted") -> tuple[RunRow, list[ValueRow]]:
    gates = [*GATES, CALIBRATED]
    run = RunRow(run_id=f"n{n:02d}", series="s", backend="cuda", suite="default", role="baseline", status=status,
                 logical_date=datetime(2026, 1, 1, tzinfo=timezone.utc) + timedelta(days=n),
                 declarations=[g.summary() for g in gates])
    values = [ValueRow(i * PER_GATE + s, g.metric_key, g.steps_key, g.constraint_key, s, 1.0 + 0.001 * (s % 7), s)
              for i, g in enumerate(gates) for s in range(PER_GATE)]
    return run, values


@pytest.fixture
def stale(pg_url):
    with open_store(pg_url) as store:
        store.upgrade()
        store._prepare_write(_night(0)[0])  # the month's partition of metric_points (every night is in it)
        with store._transaction() as cur:
            for table in (*TABLES, month_partition(run_key_month(_night(0)[0].logical_date))[0]):
                if table != "metric_points":  # a partitioned table has no storage of its own
                    cur.execute(f"ALTER TABLE {table} SET (autovacuum_enabled = false)")
        for n in range(NIGHTS):
            store.write_run(*_night(n))
            if n == 2:
                with store._transaction() as cur:
                    for table in TABLES:
                        cur.execute(f"ANALYZE {table}")
    return pg_url


def _explaining(store, plans):
    execute = store._execute

    def explained(cur, sql, params=()):
        if not sql.lstrip().upper().startswith(("CREATE", "ALTER", "SELECT SET_CONFIG")):
            cur.execute("SAVEPOINT plan")
            cur.execute("EXPLAIN " + store._sql(sql), tuple(params))
            plans.append((sql, "\n".join(row[0] for row in cur.fetchall())))
            cur.execute("RELEASE SAVEPOINT plan")
        execute(cur, sql, params)

    store._execute = explained


def test_no_statement_of_a_night_scans_the_values_table_on_stale_statistics(stale):
    plans: list[tuple[str, str]] = []
    with open_store(stale) as store:
        _explaining(store, plans)
        run, values = _night(NIGHTS, status="pending")
        store.write_run(run, values)
        verdict = evaluate(store, run.run_id)
        assert verdict["counts"]["PASS"] == 5 * PER_GATE  # reference and calibrated both read their history
        gate = GATES[0]
        store.coordinate_history("s", "cuda", "default", metric_key=gate.metric_key, steps_key=gate.steps_key,
                                 constraint_key=gate.constraint_key, step=3)
        store.declaration_values(run.run_id, gate.metric_key, gate.steps_key, gate.constraint_key)
        store.declaration_baselines(run.run_id, gate.metric_key, gate.steps_key, gate.constraint_key, 20)
        store.history(gate.metric_key, series="s", step=3)
        store.write_run(run, values)  # a retry replaces the night's rows
    values_plans = [(sql, plan) for sql, plan in plans if "metric_points" in plan]
    assert len(values_plans) >= 8
    # runs holds one row per night: a scan of it is the planner's honest choice while it is small
    scans = [(sql, plan) for sql, plan in plans if any(f"Seq Scan on {t}" in plan for t in TABLES[1:])]
    assert not scans, f"{len(scans)} statement(s) scan a whole table, e.g.:\n{scans[0][0]}\n{scans[0][1]}"
    joins = [plan for sql, plan in values_plans if "UNION ALL" in sql]
    assert len(joins) >= 2 and not [p for p in joins if "Nested Loop" in p]
