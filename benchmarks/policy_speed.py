"""Evaluate's time under ``policy: calibrated`` beside ``policy: reference``, in the same run, on the same nights.

Two series of one store hold the same nights (``history`` trusted nights, then tonight) of
``declarations`` declarations of ``steps`` steps each; one series is declared ``reference``, the
other ``calibrated``.  Tonight is evaluated on each (``record=False``: nothing is written, so each
repeat reads the same store), the best of ``repeat`` runs timed, and the ratio printed.

    python benchmarks/policy_speed.py                      # 10,000 coordinates, SQLite
    python benchmarks/policy_speed.py --steps 1000 --declarations 100 --store postgresql://...
    python benchmarks/policy_speed.py --scale smoke        # what the test suite runs
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import tempfile
from datetime import datetime, timedelta, timezone
from pathlib import Path

from _common import best_of

from airflow_metric_gate.declarations import declare
from airflow_metric_gate.pipeline import RunInfo, SeriesIdentity, evaluate, persist
from airflow_metric_gate.records import Record
from airflow_metric_gate.selection import select_steps
from airflow_metric_gate.store import open_store

SCALES = {
    "full": {"steps": 1000, "declarations": 10, "history": 20, "repeat": 3},
    "smoke": {"steps": 20, "declarations": 2, "history": 6, "repeat": 1},
}
T0 = datetime(2026, 1, 1, tzinfo=timezone.utc)


def _record(rng: random.Random, names: list[str], steps: int) -> Record:
    shared = rng.gauss(0.0, 0.03)
    return Record(metrics={m: [(s, (1.0 + shared) * (1.0 + 0.05 * rng.gauss(0.0, 1.0))) for s in range(steps)]
                           for m in names}, sources=["bench"])


def measure(url: str, steps: int, declarations: int, history: int, repeat: int) -> dict:
    """Fill the store with both series, then time tonight's evaluate under each policy."""
    names = [f"bench/metric_{i:03d}" for i in range(declarations)]
    constraint = {"rel_up": 0.5, "rel_down": 0.5}
    tonight: dict[str, str] = {}
    with open_store(url) as store:
        for policy in ("reference", "calibrated"):
            decls = [declare(m, steps="all", constraint=constraint, policy=policy, direction="up") for m in names]
            rng = random.Random(1)  # the same nights for both series
            identity = SeriesIdentity(f"bench-{policy}", "cpu", "speed")
            for night in range(history + 1):
                run = RunInfo(f"{policy}-{night:03d}", logical_date=T0 + timedelta(days=night))
                persist(store, identity, run, select_steps(_record(rng, names, steps), decls))
                if night < history:
                    evaluate(store, run.run_id)
            tonight[policy] = run.run_id
        seconds = {policy: best_of(repeat, lambda p=policy: evaluate(store, tonight[p], record=False))
                   for policy in ("reference", "calibrated")}
    return {"coordinates": steps * declarations, "history_nights": history, "seconds": seconds,
            "calibrated_over_reference": seconds["calibrated"] / seconds["reference"]}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scale", choices=sorted(SCALES), default="full")
    parser.add_argument("--steps", type=int)
    parser.add_argument("--declarations", type=int)
    parser.add_argument("--history", type=int)
    parser.add_argument("--store", help="store URL (default: a new SQLite file in a temporary folder)")
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    args = parser.parse_args(argv)
    scale = dict(SCALES[args.scale])
    for name in ("steps", "declarations", "history"):
        if getattr(args, name) is not None:
            scale[name] = getattr(args, name)
    with tempfile.TemporaryDirectory(prefix="policy-speed-") as tmp:
        url = args.store or f"sqlite:///{Path(tmp) / 'bench.db'}"
        figures = measure(url, scale["steps"], scale["declarations"], scale["history"], scale["repeat"])
    if args.json:
        print(json.dumps(figures, indent=2))
    else:
        s = figures["seconds"]
        print(f"{figures['coordinates']} coordinates, {figures['history_nights']} trusted nights: evaluate "
              f"reference {s['reference']:.3f} s, calibrated {s['calibrated']:.3f} s, "
              f"ratio {figures['calibrated_over_reference']:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
