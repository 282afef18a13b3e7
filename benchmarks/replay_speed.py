"""How fast is ``metric-gate replay``: a year of nights against evaluating them one by one.

The script stores ``--nights`` nights of ``--coords`` coordinates in a temporary SQLite store,
evaluates every night in order as the nightly gate would (timed), then replays the whole series
with the stored declarations (timed), and prints both and their ratios.  It also times the read
alone (the ordered pass over every stored value that replay makes, judging nothing): the floor
under any replay of the same nights; and the leanest replay that judges value by value: the same
pass, each value judged by the package's judging function against its coordinate's rolling
window and then fed to it, with no trust, report or bookkeeping.

    python benchmarks/replay_speed.py                  # 365 nights x 10,000 coordinates
    python benchmarks/replay_speed.py --scale smoke    # seconds
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import tempfile
import time
from collections import deque
from datetime import datetime, timedelta, timezone
from pathlib import Path

from airflow_metric_gate.declarations import declare
from airflow_metric_gate.evaluation import DEFAULT_HISTORY_LIMIT, DEFAULT_MIN_HISTORY, constraint_params, judge
from airflow_metric_gate.pipeline import RunInfo, SeriesIdentity, evaluate, persist
from airflow_metric_gate.replay import replay
from airflow_metric_gate.selection import Selection
from airflow_metric_gate.store.sqlite import SQLiteStore

SCALES = {"full": {"nights": 365, "coords": 10_000}, "smoke": {"nights": 30, "coords": 500}}
T0 = datetime(2026, 1, 1, tzinfo=timezone.utc)
METRICS = 10
CONSTRAINT = {"rel_up": 0.05, "abs_floor_up": 0.01, "rel_down": 0.05, "abs_floor_down": 0.01}


def lean_judging(store: SQLiteStore, identity: SeriesIdentity, coords: int) -> tuple[float, int]:
    """Time reading every value and judging it against its coordinate's window, and nothing else.

    Every night stores the same ``coords`` coordinates, read in key order, so a value's place in
    the pass names its coordinate.  Return the seconds and how many values failed.
    """
    params = constraint_params(CONSTRAINT)
    windows = [deque(maxlen=DEFAULT_HISTORY_LIMIT) for _ in range(coords)]
    failed = 0
    started = time.perf_counter()
    for i, (_, value, _) in enumerate(store.iter_series_points(identity.series, identity.backend, identity.suite)):
        window = windows[i % coords]
        failed += judge(value, window, params, DEFAULT_MIN_HISTORY)[0] == "FAIL"
        window.append(value)
    return time.perf_counter() - started, failed


def measure(nights: int, coords: int, seed: int = 12) -> dict:
    """Store, evaluate and replay a series; return the timings (seconds) and ratios."""
    rng = random.Random(seed)
    steps = coords // METRICS
    declarations = [declare(f"bench/metric_{m}", steps="all", constraint=CONSTRAINT) for m in range(METRICS)]
    identity = SeriesIdentity("replay-bench", "sim", "nightly")
    with tempfile.TemporaryDirectory() as tmp, SQLiteStore(Path(tmp) / "replay.db") as store:
        evaluate_s = 0.0
        started = time.perf_counter()
        for night in range(nights):
            run = RunInfo(f"night-{night:04d}", logical_date=T0 + timedelta(days=night))
            selections = [
                Selection(d, steps=list(range(steps)), values=[1.0 + 0.01 * rng.gauss(0.0, 1.0) for _ in range(steps)])
                for d in declarations
            ]
            persist(store, identity, run, selections)
            t = time.perf_counter()
            evaluate(store, run.run_id)
            evaluate_s += time.perf_counter() - t
        stored_s = time.perf_counter() - started - evaluate_s
        t = time.perf_counter()
        report = replay(store, identity.series, identity.backend, identity.suite)
        replay_s = time.perf_counter() - t
        t = time.perf_counter()
        read = sum(1 for _ in store.iter_series_points(identity.series, identity.backend, identity.suite))
        read_s = time.perf_counter() - t
        lean_s, lean_failed = lean_judging(store, identity, coords)
    return {
        "nights": nights, "coords": coords, "store_s": round(stored_s, 2),
        "evaluate_every_night_s": round(evaluate_s, 2),
        "evaluate_one_night_s": round(evaluate_s / nights, 4),
        "replay_s": round(replay_s, 2),
        "replay_vs_evaluate_every_night": round(replay_s / evaluate_s, 3),
        "replay_vs_one_night_evaluate": round(replay_s / (evaluate_s / nights), 1),
        "replayed_nights": report["summary"]["nights"],
        "read_only_s": round(read_s, 2),
        "read_only_vs_one_night_evaluate": round(read_s / (evaluate_s / nights), 1),
        "values_read": read,
        "lean_judging_s": round(lean_s, 2),
        "lean_judging_vs_one_night_evaluate": round(lean_s / (evaluate_s / nights), 1),
        "lean_judging_failed": lean_failed,
        "replay_failed": report["summary"]["counts"].get("FAIL", 0),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scale", choices=sorted(SCALES), default="full")
    parser.add_argument("--output", help="also write the figures as JSON to this file")
    args = parser.parse_args(argv)
    figures = measure(**SCALES[args.scale])
    for key, value in figures.items():
        print(f"{key:40} {value}")
    if args.output:
        Path(args.output).write_text(json.dumps(figures, indent=2), encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
