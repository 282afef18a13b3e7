"""The "Metric gate" UI's reads on a year of history, timed against a primary-key lookup.

Builds its own Postgres database (dropped afterwards): one series with ``--nights`` nightly runs of
``--coords`` coordinates each (100 metrics x 1,000 steps at full scale: 36.5 million values), plus a
second series of 30 nights, generated inside the server.  Then it times, best of ``--repeat``:

* ``pk_lookup``: one run by primary key (``get_run``), the baseline every figure is divided by;
* ``chart_365``: one coordinate over the 365 latest nights (``coordinate_history``), the chart;
* ``runs_page``/``runs_last_page``: the newest page of 50 runs plus the newest run's declarations
  (the picker), and the oldest page (``series_runs``);
* ``steps_chart``: one declaration's 1,000 values of a run, and their 20-run baseline
  (``declaration_values`` + ``declaration_baselines``), the steps="all" chart;
* ``whole_run``: reading every value of one run, what loading a run into a page would cost.

and prints each as a ratio to ``pk_lookup``, with the plan nodes Postgres chose (a sequential scan
of ``metric_values`` would mean a read that grows with the history).

    python benchmarks/ui_reads.py                 # full scale: 365 nights x 100,000 coordinates
    python benchmarks/ui_reads.py --scale mid     # 365 nights x 10,000 coordinates: minutes
    python benchmarks/ui_reads.py --scale smoke   # seconds
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import time
from collections.abc import Callable
from datetime import datetime, timezone
from pathlib import Path

import psycopg2
from _common import best_of, fresh_database

from airflow_metric_gate.store.postgres import PostgresStore
from airflow_metric_gate.store.schema import SCHEMA_VERSION_TABLE, migration_statements

SCALES = {
    "full": {"nights": 365, "metrics": 100, "steps": 1000, "other_nights": 30, "repeat": 5},
    "mid": {"nights": 365, "metrics": 10, "steps": 1000, "other_nights": 30, "repeat": 5},
    "smoke": {"nights": 40, "metrics": 5, "steps": 100, "other_nights": 5, "repeat": 2},
}
SERIES, OTHER = "bench-ui", "bench-ui-other"
T0 = datetime(2025, 1, 1, tzinfo=timezone.utc)
METRIC = "bench/metric_003"
STEPS_KEY, CONSTRAINT_KEY = '"all"', '{"rel_down":0.2,"rel_up":0.2}'



def _fresh_database(admin_url: str) -> tuple[str, Callable[[], None]]:
    return fresh_database(admin_url, "metric_gate_bench_ui")


def build(url: str, scale: dict) -> None:
    """Create the text-keyed schema (version 5), load the history inside the server, upgrade, analyze.

    The upgrade to the integer-keyed schema (version 6) copies every value: the benchmark's store
    is what an upgraded production store is.
    """
    store = PostgresStore.from_url(url)
    with store._transaction(schema=False) as cur:
        for version in range(1, 6):
            for statement in migration_statements(version, "postgres"):
                cur.execute(statement)
            cur.execute(f"INSERT INTO {SCHEMA_VERSION_TABLE} (version, upgraded_at) VALUES (%s, now())", (version,))
    store.close()
    declarations = json.dumps([{"metric_key": f"bench/metric_{m:03d}", "steps_key": STEPS_KEY,
                                "constraint_key": CONSTRAINT_KEY, "constraint": {"rel_down": 0.2, "rel_up": 0.2},
                                "enforce": False, "allowlist_reason": None} for m in range(scale["metrics"])])
    conn = psycopg2.connect(url)
    conn.autocommit = True
    with conn.cursor() as cur:
        # Load without the value indexes, then build them once (as a restore would).
        cur.execute("ALTER TABLE metric_values DROP CONSTRAINT metric_values_run_coordinate_key")
        cur.execute("DROP INDEX metric_values_coordinate_idx")
        for series, nights in ((SERIES, scale["nights"]), (OTHER, scale["other_nights"])):
            prefix = "n" if series == SERIES else "o"
            cur.execute(
                "INSERT INTO runs (run_id, series, backend, suite, role, status, logical_date, created_at, "
                "updated_at, dag_id, airflow_run_id, provenance, declarations, selection_errors, status_reason) "
                "SELECT %s || lpad(n::text, 4, '0'), %s, 'cuda', 'nightly', 'baseline', "
                "CASE WHEN n %% 17 = 5 THEN 'untrusted' ELSE 'trusted' END, %s + n * interval '1 day', now(), now(), "
                "'bench_dag', 'scheduled__' || n, '{\"dag_id\": \"bench_dag\"}', %s, '[]', '100000 PASS' "
                "FROM generate_series(0, %s - 1) n",
                (prefix, series, T0, declarations, nights),
            )
            for start in range(0, nights, 10):
                cur.execute(
                    "INSERT INTO metric_values (run_id, metric_key, steps_key, constraint_key, step, value, "
                    "at_step, ordinal) "
                    "SELECT %s || lpad(n::text, 4, '0'), 'bench/metric_' || lpad(m::text, 3, '0'), %s, %s, s, "
                    "1.0 + ((s * 7919 + m * 31 + n) %% 1000) * 0.001, s, m * %s + s "
                    "FROM generate_series(%s, %s) n, generate_series(0, %s - 1) m, generate_series(0, %s - 1) s",
                    (prefix, STEPS_KEY, CONSTRAINT_KEY, scale["steps"], start, min(start + 9, nights - 1),
                     scale["metrics"], scale["steps"]),
                )
            print(f"  loaded {series}: {nights} nights", flush=True)
        cur.execute(
            "ALTER TABLE metric_values ADD CONSTRAINT metric_values_run_coordinate_key "
            "UNIQUE (run_id, metric_key, steps_key, constraint_key, step)"
        )
        cur.execute(
            "CREATE INDEX metric_values_coordinate_idx ON metric_values (metric_key, steps_key, constraint_key, step)"
        )
    conn.close()
    with PostgresStore.from_url(url) as store:
        store.upgrade()
    conn = psycopg2.connect(url)
    conn.autocommit = True
    with conn.cursor() as cur:
        cur.execute("ANALYZE")
    conn.close()


def plan_nodes(url: str, sql: str, params: tuple) -> list[str]:
    """Return the scan nodes of a statement's plan (``Index Scan using x on t``, ``Seq Scan on t``)."""
    conn = psycopg2.connect(url)
    with conn.cursor() as cur:
        cur.execute("EXPLAIN " + sql, params)
        lines = [row[0] for row in cur.fetchall()]
    conn.close()
    nodes = []
    for line in lines:
        match = re.search(r"((?:Parallel )?(?:Index Only Scan|Index Scan|Bitmap Index Scan|Seq Scan)[^(]*)", line)
        if match:
            nodes.append(match.group(1).strip())
    return nodes


def measure(url: str, scale: dict) -> dict:
    """Time each UI read (see the module docstring) and return the figures."""
    store = PostgresStore.from_url(url)
    nights = scale["nights"]
    last = f"n{nights - 1:04d}"
    coord = {"metric_key": METRIC, "steps_key": STEPS_KEY, "constraint_key": CONSTRAINT_KEY}
    scope = {"dag_ids": {"bench_dag"}, "include_unowned": False}
    store.get_run(last)  # connect and warm up
    out: dict = {}

    def chart() -> None:
        rows = store.coordinate_history(SERIES, "cuda", "nightly", step=scale["steps"] // 2, limit=365, **coord,
                                        **scope)
        assert len(rows) == min(365, nights), len(rows)

    def runs_page() -> None:
        page = store.series_runs(SERIES, "cuda", "nightly", limit=51, declarations=False, **scope)
        assert len(page) == min(51, nights)
        assert store.series_runs(SERIES, "cuda", "nightly", limit=1, **scope)[0].declarations  # the picker's

    def runs_last_page() -> None:
        store.series_runs(SERIES, "cuda", "nightly", limit=51, offset=(nights // 50) * 50, declarations=False,
                          **scope)

    def steps() -> None:
        assert len(store.declaration_values(last, METRIC, STEPS_KEY, CONSTRAINT_KEY)) == scale["steps"]
        assert len(store.declaration_baselines(last, METRIC, STEPS_KEY, CONSTRAINT_KEY, 20)) == scale["steps"]

    def steps_values() -> None:
        assert len(store.declaration_values(last, METRIC, STEPS_KEY, CONSTRAINT_KEY)) == scale["steps"]

    def steps_baseline() -> None:
        assert len(store.declaration_baselines(last, METRIC, STEPS_KEY, CONSTRAINT_KEY, 20)) == scale["steps"]

    def whole_run() -> None:
        with store._transaction() as cur:
            store._execute(cur, "SELECT step, value FROM metric_values WHERE run_id = %s", (last,))
            assert len(cur.fetchall()) == scale["metrics"] * scale["steps"]

    repeat = scale["repeat"]
    out["pk_lookup_s"] = best_of(max(repeat, 20), lambda: store.get_run(last))
    for name, fn in (("chart_365", chart), ("runs_page", runs_page), ("runs_last_page", runs_last_page),
                     ("steps_chart", steps), ("steps_values", steps_values), ("steps_baseline", steps_baseline),
                     ("whole_run", whole_run)):
        fn()  # warm
        out[f"{name}_s"] = best_of(repeat, fn)
        out[f"{name}_vs_pk_lookup"] = out[f"{name}_s"] / out["pk_lookup_s"]
    store.close()
    out["chart_365_plan"] = plan_nodes(
        url,
        "WITH k AS (SELECT c.coordinate FROM coordinates c JOIN declarations d ON d.declaration = c.declaration "
        "WHERE d.metric_key = %s AND d.steps_key = %s AND d.constraint_key = %s AND c.step = %s) "
        "SELECT r.run_id, v.value FROM runs r CROSS JOIN k JOIN metric_points v ON v.run_key = r.run_key "
        "AND (v.coordinate >> 6) = (k.coordinate >> 6) AND v.coordinate = k.coordinate "
        "WHERE r.series = %s AND r.backend = %s "
        "AND r.suite = %s AND r.dag_id IN (%s) ORDER BY r.logical_date DESC, r.run_id DESC LIMIT 365",
        (METRIC, STEPS_KEY, CONSTRAINT_KEY, scale["steps"] // 2, SERIES, "cuda", "nightly", "bench_dag"),
    )
    out["steps_baseline_plan"] = plan_nodes(
        url,
        "SELECT c.step, m.value FROM runs b JOIN metric_points m ON m.run_key = b.run_key "
        "JOIN coordinates c ON (c.coordinate >> 6) = (m.coordinate >> 6) AND c.coordinate = m.coordinate "
        "JOIN declarations d ON d.declaration = c.declaration "
        "WHERE b.run_id IN (%s, %s, %s) AND d.metric_key = %s AND d.steps_key = %s AND d.constraint_key = %s",
        (f"n{nights - 2:04d}", f"n{nights - 3:04d}", f"n{nights - 4:04d}", METRIC, STEPS_KEY, CONSTRAINT_KEY),
    )
    out["runs_page_plan"] = plan_nodes(
        url,
        "SELECT run_id FROM runs r WHERE r.series = %s AND r.backend = %s AND r.suite = %s AND r.dag_id IN (%s) "
        "ORDER BY r.logical_date DESC, r.run_id DESC LIMIT 51 OFFSET 0",
        (SERIES, "cuda", "nightly", "bench_dag"),
    )
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scale", choices=sorted(SCALES), default="full")
    parser.add_argument("--pg-url", default=os.environ.get("METRIC_GATE_BENCH_PG_URL",
                                                           "postgresql://postgres@127.0.0.1:5432/postgres"))
    parser.add_argument("--output", default="benchmarks/results/ui_reads.json")
    args = parser.parse_args(argv)
    scale = SCALES[args.scale]
    figures: dict = {"scale": args.scale, "nights": scale["nights"],
                     "coordinates_per_night": scale["metrics"] * scale["steps"]}
    url, drop = _fresh_database(args.pg_url)
    try:
        started = time.perf_counter()
        print(f"benchmark: building {scale['nights']} nights x {figures['coordinates_per_night']} coordinates ...",
              flush=True)
        build(url, scale)
        figures["build_s"] = time.perf_counter() - started
        figures.update(measure(url, scale))
    finally:
        drop()
    print()
    for key, value in figures.items():
        if isinstance(value, float):
            print(f"{key:<32} {value:>12.4g}")
        elif isinstance(value, list):
            print(f"{key:<32} {'; '.join(value)}")
    out = Path(args.output)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(figures, indent=2, default=str))
    print(f"\nfigures written to {out}")
    plans = ("chart_365_plan", "steps_baseline_plan", "runs_page_plan")
    seq = [n for key in plans for n in figures[key] if "Seq Scan on metric_points" in n]
    if seq and args.scale != "smoke":
        print("a UI read scans metric_values sequentially: it grows with the history")
    return 0


if __name__ == "__main__":
    sys.exit(main())
