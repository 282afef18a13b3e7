"""A fleet on one Postgres: many series written and evaluated at once by 1, 2, 4 and 8 processes.

Each process count gets a fresh database (dropped afterwards) and the same work: ``--series``
series, each persisting and evaluating ``--points`` values a night (ten ``steps: "all"``
declarations) for ``--nights`` nights, through the pipeline the operators call
(:func:`~airflow_metric_gate.pipeline.persist`, then
:func:`~airflow_metric_gate.pipeline.evaluate`).  The series are dealt to the processes in turn;
each process works night by night through its own series, so every night of the fleet is written
while other series are being written and evaluated.

Reported per process count: the wall time, values per second (persisted and evaluated), how many
series-nights failed (expected: none), and the median evaluate time per series at each night, which
says whether evaluate slows down as the store fills with other series.

    python benchmarks/fleet.py                    # 100 series x 100,000 values, 3 nights, 1/2/4/8 processes
    python benchmarks/fleet.py --scale medium     # 20 series x 10,000 values, 5 nights
    python benchmarks/fleet.py --scale smoke      # seconds; what CI runs
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import statistics
import time
import traceback
from datetime import datetime, timedelta, timezone

from _common import fresh_database

from airflow_metric_gate.declarations import declare
from airflow_metric_gate.pipeline import RunInfo, SeriesIdentity, evaluate, persist
from airflow_metric_gate.selection import Selection
from airflow_metric_gate.store import open_store

SCALES = {
    "full": {"series": 100, "points": 100_000, "nights": 3, "processes": (1, 2, 4, 8)},
    "medium": {"series": 20, "points": 10_000, "nights": 5, "processes": (1, 2, 4, 8)},
    "smoke": {"series": 3, "points": 200, "nights": 2, "processes": (1, 2)},
}
METRICS = 10
CONSTRAINT = {"rel_up": 0.5, "abs_floor_up": 0.1, "rel_down": 0.8, "abs_floor_down": 0.1}
T0 = datetime(2026, 1, 1, tzinfo=timezone.utc)


def _selections(series: int, night: int, points: int, policy: str) -> list[Selection]:
    """One night of one series: ``METRICS`` metrics of ``points / METRICS`` steps, values near 1."""
    per = points // METRICS
    out = []
    for m in range(METRICS):
        pts = [(s, 1.0 + 0.001 * ((s * 31 + m * 7 + night + series) % 50), s) for s in range(per)]
        out.append(Selection(declare(f"fleet/metric_{m:02d}", steps="all", constraint=CONSTRAINT, policy=policy),
                             points=pts))
    return out


def _worker(task: tuple[str, list[int], int, int, str], barrier, results) -> None:
    """Persist and evaluate every night of the given series; put one row per series-night on ``results``.

    Every process imports and connects first, then waits for the others: start-up is not timed.
    """
    url, series_list, nights, points, policy = task
    rows = []
    with open_store(url) as store:
        store.get_run("none")  # connected
        barrier.wait()
        began = time.time()
        for night in range(nights):
            for series in series_list:
                row: dict = {"series": series, "night": night}
                try:
                    selections = _selections(series, night, points, policy)
                    run = RunInfo(f"fleet-{series:03d}-{night:03d}", logical_date=T0 + timedelta(days=night))
                    start = time.perf_counter()
                    persist(store, SeriesIdentity(f"series-{series:03d}", "cuda", "fleet"), run, selections)
                    row["persist_s"] = time.perf_counter() - start
                    start = time.perf_counter()
                    verdict = evaluate(store, run.run_id)
                    row["evaluate_s"] = time.perf_counter() - start
                    judged = sum(verdict["counts"][k] for k in ("PASS", "FAIL", "INACTIVE"))
                    if judged < points or verdict["counts"]["ERROR"]:
                        row["error"] = f"counts {verdict['counts']} for {points} values"
                except Exception:  # noqa: BLE001 - every failure is counted and shown, none stops the fleet
                    row["error"] = traceback.format_exc(limit=3)
                rows.append(row)
    results.put((began, time.time(), rows))


def fleet(admin_url: str, processes: int, scale: dict, policy: str) -> dict:
    """Run the fleet with ``processes`` processes on a fresh database; its figures."""
    url, drop = fresh_database(admin_url, "metric_gate_fleet")
    try:
        with open_store(url) as store:
            store.upgrade()  # the schema exists before the fleet starts, as in a deployment
        tasks = [(url, list(range(p, scale["series"], processes)), scale["nights"], scale["points"], policy)
                 for p in range(processes)]
        ctx = multiprocessing.get_context("spawn")
        barrier, queue = ctx.Barrier(processes), ctx.Queue()
        workers = [ctx.Process(target=_worker, args=(task, barrier, queue)) for task in tasks]
        for w in workers:
            w.start()
        parts = [queue.get(timeout=6 * 3600) for _ in workers]
        for w in workers:
            w.join()
        rows = [row for _, _, part in parts for row in part]
        wall = max(end for _, end, _ in parts) - min(began for began, _, _ in parts)
    finally:
        drop()
    errors = [r for r in rows if "error" in r]
    ok = [r for r in rows if "error" not in r]
    by_night = {n: [r["evaluate_s"] for r in ok if r["night"] == n] for n in range(scale["nights"])}
    values = scale["series"] * scale["nights"] * scale["points"]
    return {
        "processes": processes,
        "wall_s": round(wall, 2),
        "values_per_s": round(values / wall),
        "series_nights": len(rows),
        "errors": len(errors),
        "first_error": errors[0]["error"] if errors else None,
        "persist_median_s": round(statistics.median(r["persist_s"] for r in ok), 4) if ok else None,
        "evaluate_median_s_by_night": [round(statistics.median(v), 4) if v else None for v in by_night.values()],
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scale", choices=sorted(SCALES), default="full")
    parser.add_argument("--pg-url", default=os.environ.get("METRIC_GATE_BENCH_PG_URL",
                                                         "postgresql://postgres@127.0.0.1:5432/postgres"))
    parser.add_argument("--processes", type=int, nargs="+", help="process counts (default: the scale's)")
    parser.add_argument("--series", type=int, help="series (default: the scale's)")
    parser.add_argument("--points", type=int, help="values per series and night (default: the scale's)")
    parser.add_argument("--nights", type=int, help="nights (default: the scale's)")
    parser.add_argument("--policy", choices=("calibrated", "reference"), default="calibrated")
    parser.add_argument("--output", help="also write the figures as JSON here")
    args = parser.parse_args(argv)
    scale = dict(SCALES[args.scale])
    for key in ("series", "points", "nights"):
        if getattr(args, key) is not None:
            scale[key] = getattr(args, key)
    results = []
    print(f"fleet: {scale['series']} series x {scale['points']} values x {scale['nights']} nights, "
          f"policy {args.policy}, {os.cpu_count()} CPUs")
    print(f"{'processes':>9} {'wall s':>8} {'values/s':>10} {'x 1 proc':>8} {'errors':>6} {'persist s':>9}  "
          "evaluate s by night (median per series)")
    for processes in args.processes or scale["processes"]:
        row = fleet(args.pg_url, processes, scale, args.policy)
        row["throughput_vs_1"] = round(row["values_per_s"] / results[0]["values_per_s"], 2) if results else 1.0
        results.append(row)
        print(f"{processes:>9} {row['wall_s']:>8} {row['values_per_s']:>10} {row['throughput_vs_1']:>8} "
              f"{row['errors']:>6} {row['persist_median_s']!s:>9}  {row['evaluate_median_s_by_night']}")
        if row["first_error"]:
            print(f"  first error: {row['first_error']}")
    figures = {"scale": args.scale, "policy": args.policy, **scale, "processes": [r["processes"] for r in results],
               "runs": results, "errors": sum(r["errors"] for r in results), "cpus": os.cpu_count()}
    if args.output:
        with open(args.output, "w") as fh:
            json.dump(figures, fh, indent=2)
    return 0 if figures["errors"] == 0 else 1


if __name__ == "__main__":
    raise SystemExit(main())
