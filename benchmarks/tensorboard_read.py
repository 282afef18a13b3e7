"""Reading a TensorBoard event file: this package's reader against tbparse, on the same file, in the same run.

The event file is written by tensorboardX (``--points`` scalars over ``--tags`` tags, one scalar per
event, as trainers log them), once per work folder.  Each reader then runs in a fresh process of
its own, alternately, ``--repeat`` times:

- ``ours``: ``read_record(folder, format="tensorboard")`` (every record's CRCs checked);
- ``tbparse``: ``SummaryReader(folder).scalars`` (TensorBoard's event accumulator, every scalar kept).

Timed is the read alone (imports excluded); peak memory is the growth of the process's peak
resident set during the read.  For this package's reader the growth is also given relative to the
size of what it returns (the record's lists and the objects in them).  A last process reads the
file with both and checks that they return the same steps and values for every tag.

Usage::

    python benchmarks/tensorboard_read.py [--points 1000000] [--tags 10] [--repeat 3] [--workdir DIR] [--output FILE]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def _write_events(folder: Path, points: int, tags: int) -> None:
    from tensorboardX import SummaryWriter

    steps = points // tags
    writer = SummaryWriter(str(folder), max_queue=10_000, flush_secs=3600)
    names = [f"train/metric_{i}" for i in range(tags)]
    for step in range(steps):
        for i, name in enumerate(names):
            writer.add_scalar(name, 0.5 + 0.001 * ((step * 7 + i) % 1000), step)
    writer.close()


def _peak_rss() -> int:
    """The process's peak resident set so far, in bytes (Linux reports KiB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def _output_bytes(record) -> int:
    """The memory held by a record's points: the lists and each distinct object in them."""
    seen: set[int] = set()
    total = 0
    for metric in record:
        columns = record.columns(metric)
        parts = (columns.steps, columns.values) if columns is not None else (record[metric],)
        for part in parts:
            total += sys.getsizeof(part)
            for item in part:
                if id(item) not in seen:
                    seen.add(id(item))
                    total += sys.getsizeof(item)
    return total


def _child(reader: str, folder: str) -> dict:
    if reader == "ours":
        from airflow_metric_gate.records import read_record

        def read():
            return read_record(folder, format="tensorboard")
    else:
        from tbparse import SummaryReader

        def read():
            return SummaryReader(folder).scalars
    before = _peak_rss()
    start = time.perf_counter()
    result = read()
    seconds = time.perf_counter() - start
    figures = {"seconds": seconds, "peak_growth_bytes": _peak_rss() - before}
    if reader == "ours":
        figures["points"] = result.point_count()
        figures["output_bytes"] = _output_bytes(result)
    else:
        figures["points"] = len(result)
    return figures


def _check(folder: str) -> dict:
    from tbparse import SummaryReader

    from airflow_metric_gate.records import read_record

    ours = read_record(folder, format="tensorboard")
    frame = SummaryReader(folder).scalars
    theirs = {tag: list(zip(group["step"].tolist(), group["value"].tolist())) for tag, group in frame.groupby("tag")}
    same = sorted(ours) == sorted(theirs) and all(ours[tag] == theirs[tag] for tag in ours)
    return {"same": same, "tags": len(ours), "points": ours.point_count()}


def _spawn(*args: str) -> dict:
    proc = subprocess.run([sys.executable, __file__, *args], capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise SystemExit(f"benchmark child {args[:2]} failed:\n{proc.stderr[-4000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--points", type=int, default=1_000_000)
    parser.add_argument("--tags", type=int, default=10)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--workdir", default=None, help="where the event file is written (kept for later runs)")
    parser.add_argument("--output", default=None, help="write the figures here as JSON")
    parser.add_argument("--child", nargs=2, metavar=("READER", "FOLDER"), help=argparse.SUPPRESS)
    parser.add_argument("--check", metavar="FOLDER", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        print(json.dumps(_child(*args.child)))
        return 0
    if args.check:
        print(json.dumps(_check(args.check)))
        return 0

    workdir = Path(args.workdir or tempfile.mkdtemp(prefix="tb-bench-"))
    folder = workdir / f"events-{args.points}-{args.tags}"
    if not folder.exists() or not any("tfevents" in p.name for p in folder.iterdir()):
        folder.mkdir(parents=True, exist_ok=True)
        print(f"writing {args.points:,} scalars with tensorboardX into {folder} ...", flush=True)
        _write_events(folder, args.points, args.tags)
    size = sum(p.stat().st_size for p in folder.iterdir())
    runs: dict[str, list[dict]] = {"ours": [], "tbparse": []}
    for _ in range(args.repeat):
        for reader in runs:
            runs[reader].append(_spawn("--child", reader, str(folder)))
    check = _spawn("--check", str(folder))
    ours_s = min(r["seconds"] for r in runs["ours"])
    theirs_s = min(r["seconds"] for r in runs["tbparse"])
    ours_mem = statistics.median(r["peak_growth_bytes"] for r in runs["ours"])
    theirs_mem = statistics.median(r["peak_growth_bytes"] for r in runs["tbparse"])
    output = runs["ours"][0]["output_bytes"]
    figures = {
        "points": args.points, "tags": args.tags, "file_bytes": size, "repeat": args.repeat,
        "ours_seconds": [r["seconds"] for r in runs["ours"]],
        "tbparse_seconds": [r["seconds"] for r in runs["tbparse"]],
        "speedup_vs_tbparse": theirs_s / ours_s,
        "ours_peak_growth_bytes": ours_mem, "tbparse_peak_growth_bytes": theirs_mem,
        "ours_output_bytes": output, "ours_peak_growth_vs_output": ours_mem / output,
        "same_points_as_tbparse": check["same"],
        "python": platform.python_version(), "machine": f"{os.cpu_count()} cores, {platform.machine()}",
    }
    mib = 1 << 20
    print(f"event file: {args.points:,} scalars, {args.tags} tags, {size / mib:.1f} MiB")
    print(f"ours     best {ours_s:.2f} s  peak growth {ours_mem / mib:.0f} MiB "
          f"({ours_mem / output:.2f}x its output of {output / mib:.0f} MiB)")
    print(f"tbparse  best {theirs_s:.2f} s  peak growth {theirs_mem / mib:.0f} MiB")
    print(f"speed-up vs tbparse: {theirs_s / ours_s:.1f}x; same points: {check['same']}")
    if args.output:
        Path(args.output).write_text(json.dumps(figures, indent=2))
    return 0 if check["same"] else 1


if __name__ == "__main__":
    sys.exit(main())
