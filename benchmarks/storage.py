"""Bytes per stored value on PostgreSQL, indexes included (issue 19's storage figure).

Writes ``nights`` nights of ``coords`` coordinates (ten ``steps: "all"`` declarations) through the
store, then divides ``pg_total_relation_size`` summed over every table of the store (and every
partition of ``metric_points``) by the number of values stored.  A fresh database is created and dropped.

    python benchmarks/storage.py --coords 10000 --nights 30 120
"""

from __future__ import annotations

import argparse
import json
import os
from datetime import datetime, timedelta, timezone

from _common import fresh_database

from airflow_metric_gate.store import RunRow, ValueRow, open_store

TABLES = ("runs", "declarations", "coordinates", "metric_points", "run_blocks", "metric_gate_schema")
CONSTRAINT = '{"abs_floor_down":0.1,"abs_floor_up":0.1,"rel_down":0.8,"rel_up":0.5}'
T0 = datetime(2026, 1, 1, tzinfo=timezone.utc)


def bytes_per_value(url: str, coords: int, nights: list[int]) -> list[dict]:
    """Write up to ``max(nights)`` nights and report the size after each night count in ``nights``."""
    per = coords // 10
    out = []
    with open_store(url) as store:
        for n in range(max(nights)):
            run = RunRow(run_id=f"night-{n:04d}", series="bench", backend="cuda", suite="default", role="baseline",
                         status="trusted", logical_date=T0 + timedelta(days=n))
            values = [ValueRow(m * per + s, f"bench/metric_{m:02d}", '"all"', CONSTRAINT, s,
                               1.0 + 0.001 * ((s * 7919 + m + n) % 1000), s) for m in range(10) for s in range(per)]
            store.write_run(run, values)
            if n + 1 in nights:
                with store._transaction() as cur:
                    sizes = {}
                    for table in TABLES:
                        # a partitioned table's size is its partitions' (schema version 7 on)
                        cur.execute("SELECT pg_total_relation_size(%s) + COALESCE((SELECT SUM(pg_total_relation_size("
                                    "relid)) FROM pg_partition_tree(%s) WHERE relid <> %s::regclass), 0)",
                                    (table, table, table))
                        sizes[table] = int(cur.fetchone()[0])
                    cur.execute("SELECT COUNT(*) FROM metric_points")
                    stored = int(cur.fetchone()[0])
                out.append({"nights": n + 1, "coords": per * 10, "values": stored, "bytes": sum(sizes.values()),
                            "bytes_per_value": round(sum(sizes.values()) / stored, 1), "tables": sizes})
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pg-url", default=os.environ.get("METRIC_GATE_BENCH_PG_URL",
                                                         "postgresql://postgres@127.0.0.1:5432/postgres"))
    parser.add_argument("--coords", type=int, default=100_000)
    parser.add_argument("--nights", type=int, nargs="+", default=[30, 120])
    args = parser.parse_args(argv)
    url, drop = fresh_database(args.pg_url, "metric_gate_storage")
    try:
        for row in bytes_per_value(url, args.coords, sorted(args.nights)):
            print(json.dumps(row))
    finally:
        drop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
