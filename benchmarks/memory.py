"""Peak memory of a night, per point: through ``metric-gate run`` and through the operators' stages.

Each measured night runs in a process of its own, and its peak resident set size is the kernel's
figure for that child (``ru_maxrss`` of the rusage ``os.wait4`` returns for it, as
``resource.getrusage(RUSAGE_CHILDREN)`` reports it for all children).  Every scale writes a record
of that many points (100 metrics under ``steps: "all"``), then gates it on two nights into a fresh
store: the first night has no history (cold), the second is judged against the first.

    python benchmarks/memory.py                        # 10^5 and 10^6 points, Postgres and SQLite
    python benchmarks/memory.py --points 10000000 --stores postgres   # the 10^7 night (many minutes)
    python benchmarks/memory.py --scale smoke          # seconds; what CI runs (no limit judged)
    python benchmarks/memory.py --failing --points 100000 1000000 --stores sqlite   # a night that fails
    python benchmarks/memory.py --failing --policy calibrated --stores sqlite       # ... under the calibrated policy

With ``--failing`` the second night's values are ten times the first's: every one of its steps
FAILs, the verdict's worst case (every FAIL result is judged, summarized and ranked).

The operators' path runs, in one child process, what the four operators run one after the
other: the record read as ``IngestRecordOperator`` reads it, read again and selected as
``PersistValuesOperator`` does, persisted, then evaluated with the XCom size limit.  The limit
judged: at most 4 GiB peak for any night measured.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path

from _common import fresh_database

ROOT = Path(__file__).resolve().parents[1]
SCALES = {"full": (100_000, 1_000_000), "smoke": (2_000, 20_000)}
#: The most memory one night may take, whatever its size.
LIMIT_BYTES = 4 * 2**30
METRICS = 100
CONSTRAINT = "{rel_up: 0.5, abs_floor_up: 0.1, rel_down: 0.8, abs_floor_down: 0.1}"
T0 = datetime(2026, 1, 1, tzinfo=timezone.utc)


def write_record(path: Path, points: int, night: int, factor: float = 1.0) -> None:
    """Write ``points`` points over :data:`METRICS` metrics, one line per metric, a little different each night.

    :param factor: every value is multiplied by it (10: every step leaves a band set by factor 1).
    """
    per = points // METRICS
    with open(path, "w") as fh:
        for m in range(METRICS):
            values = ",".join(f"[{s},{factor * (1.0 + 0.001 * ((s * 7919 + m + night) % 1000))!r}]"
                              for s in range(per))
            fh.write(f'{{"metric": "bench/metric_{m:03d}", "series": [{values}]}}\n')


def write_gates(path: Path, policy: str | None = None) -> None:
    lines = [f"policy: {policy}"] if policy else []
    lines.append("gates:")
    for m in range(METRICS):
        lines += [f"  - metric_key: bench/metric_{m:03d}", "    steps: all", f"    constraint: {CONSTRAINT}"]
    path.write_text("\n".join(lines) + "\n")


def measured(argv: list[str], env: dict[str, str]) -> tuple[int, float]:
    """Run ``argv`` as a child; return its peak resident set size in bytes, and its seconds."""
    start = time.perf_counter()
    proc = subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    assert proc.stderr is not None
    err = proc.stderr.read()
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    seconds = time.perf_counter() - start
    if proc.returncode != 0:
        raise RuntimeError(f"{argv[:4]} exited {proc.returncode}: {err.decode()[-2000:]}")
    # ru_maxrss is in KiB on Linux
    return usage.ru_maxrss * 1024, seconds


def operators_child(record: str, store_url: str, night: int) -> None:
    """What the four operators run for one night, in this process (``--child``)."""
    from airflow_metric_gate.declarations import load_gates_file
    from airflow_metric_gate.pipeline import RunInfo, SeriesIdentity, evaluate, persist, record_warnings
    from airflow_metric_gate.records import read_record
    from airflow_metric_gate.selection import select_steps
    from airflow_metric_gate.store import open_store
    from airflow_metric_gate.verdict import XCOM_MAX_BYTES

    declarations = load_gates_file(record + ".gates.yaml")
    ingested = read_record(record)  # IngestRecordOperator: read and check, pass on counts only
    counts = {"metrics": len(ingested), "points": ingested.point_count()}
    del ingested
    identity = SeriesIdentity("bench-operators")
    run = RunInfo(run_id=f"op-n{night}", logical_date=T0 + timedelta(days=night))
    with open_store(store_url) as store:
        record_read = read_record(record)  # PersistValuesOperator: read again, select, write
        selections = select_steps(record_read, declarations)
        stored = persist(store, identity, run, selections, warnings=record_warnings(record_read, declarations))
        del record_read, selections
        verdict = evaluate(store, run.run_id, write_version=stored["write_version"], max_bytes=XCOM_MAX_BYTES)
    # one result per point; the calibrated policy adds one night result per failing declaration
    assert 0 <= sum(verdict["counts"].values()) - counts["points"] <= counts["metrics"], (verdict["counts"], counts)
    # the summary is never cut (docs/verdict.md): a night on which every one of the 100 calibrated
    # declarations fails has a verdict above the XCom limit (about 1.3 KB per failing declaration)
    calibrated = any(getattr(d, "policy", None) == "calibrated" for d in declarations)
    assert len(json.dumps(verdict)) <= XCOM_MAX_BYTES or calibrated


def bench(points: int, store: str, pg_url: str, workdir: Path, *, failing: bool = False,
          policy: str | None = None) -> dict:
    """Peak memory of two nights of ``points`` points on one store, through the CLI and the operators.

    :param failing: the second night fails at every step (its values ten times the first's).
    :param policy: the gates file's top-level ``policy`` (``None``: the default, ``reference``).
    """
    gates = workdir / "gates.yaml"
    write_gates(gates, policy)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    drop = None
    if store == "postgres":
        url, drop = fresh_database(pg_url, "mg_bench_memory")
    else:
        url = f"sqlite:///{workdir / f'memory-{points}.db'}"
    out: dict = {}
    try:
        for night in (1, 2):
            record = workdir / f"record-{points}-{night}.jsonl"
            write_record(record, points, night, 10.0 if failing and night == 2 else 1.0)
            (workdir / f"{record.name}.gates.yaml").write_bytes(gates.read_bytes())
            cli = [sys.executable, "-m", "airflow_metric_gate.cli", "run", str(record), "--gates", str(gates),
                   "--series", "bench-cli", "--store", url, "--run-id", f"cli-n{night}",
                   "--logical-date", (T0 + timedelta(days=night)).isoformat(), "--json"]
            rss, seconds = measured(cli, env)
            out[f"cli_night{night}"] = {"peak_rss_bytes": rss, "seconds": seconds}
            child = [sys.executable, __file__, "--child", str(record), url, str(night)]
            rss, seconds = measured(child, env)
            out[f"operators_night{night}"] = {"peak_rss_bytes": rss, "seconds": seconds}
            record.unlink()
    finally:
        if drop is not None:
            drop()
    for path in ("cli", "operators"):
        peak = max(out[f"{path}_night{n}"]["peak_rss_bytes"] for n in (1, 2))
        out[f"{path}_peak_rss_bytes"] = peak
        out[f"{path}_peak_bytes_per_point"] = peak / points
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--scale", choices=sorted(SCALES), default="full")
    parser.add_argument("--points", type=int, nargs="+", help="scales to run instead of the scale's")
    parser.add_argument("--stores", nargs="+", choices=("postgres", "sqlite"), default=["postgres", "sqlite"])
    parser.add_argument("--pg-url", default=os.environ.get("METRIC_GATE_BENCH_PG_URL",
                                                          "postgresql://postgres@127.0.0.1:5432/postgres"))
    parser.add_argument("--failing", action="store_true", help="the second night FAILs at every step")
    parser.add_argument("--policy", choices=("reference", "calibrated"),
                        help="the gates file's top-level policy (default: none written, so reference)")
    parser.add_argument("--output", help="write the figures as JSON here")
    parser.add_argument("--child", nargs=3, metavar=("RECORD", "STORE", "NIGHT"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        operators_child(args.child[0], args.child[1], int(args.child[2]))
        return 0
    figures: dict = {"scale": args.scale, "limit_bytes": LIMIT_BYTES, "failing": args.failing,
                     "policy": args.policy or "reference", "runs": {}}
    print(f"{'points':>10} {'store':>8} {'path':>9} {'peak MiB':>9} {'B/point':>8} {'s/night':>8}")
    with tempfile.TemporaryDirectory(prefix="mg-memory-") as tmp:
        for points in args.points or SCALES[args.scale]:
            for store in args.stores:
                found = bench(points, store, args.pg_url, Path(tmp), failing=args.failing, policy=args.policy)
                figures["runs"][f"{store}_{points}"] = found
                for path in ("cli", "operators"):
                    peak = found[f"{path}_peak_rss_bytes"]
                    seconds = max(found[f"{path}_night{n}"]["seconds"] for n in (1, 2))
                    print(f"{points:>10} {store:>8} {path:>9} {peak / 2**20:>9.1f} "
                          f"{found[f'{path}_peak_bytes_per_point']:>8.1f} {seconds:>8.1f}", flush=True)
    for store in args.stores:  # what one more point costs, between two scales measured
        sizes = sorted(int(k.rsplit("_", 1)[1]) for k in figures["runs"] if k.startswith(store + "_"))
        for small, large in zip(sizes, sizes[1:]):
            for path in ("cli", "operators"):
                grown = (figures["runs"][f"{store}_{large}"][f"{path}_peak_rss_bytes"]
                         - figures["runs"][f"{store}_{small}"][f"{path}_peak_rss_bytes"])
                figures[f"{store}_{path}_growth_bytes_per_point_{small}_to_{large}"] = grown / (large - small)
                print(f"{store} {path}: {grown / (large - small):.1f} B per point more from {small} to {large}")
    worst = max(r[f"{p}_peak_rss_bytes"] for r in figures["runs"].values() for p in ("cli", "operators"))
    figures["peak_rss_bytes"] = worst
    figures["peak_vs_limit"] = worst / LIMIT_BYTES
    within = worst <= LIMIT_BYTES
    print(f"figure peak_vs_limit {worst / LIMIT_BYTES:.3f} (limit <= 1.0: {'met' if within else 'MISSED'})")
    if args.output:
        Path(args.output).write_text(json.dumps(figures, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
