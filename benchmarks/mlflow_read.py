"""Reading an MLflow run of 10^5 points per metric: every point, in bounded requests.

Starts a real ``mlflow server`` on loopback (SQLite backend, in a temporary folder), logs one run
of ``--metrics`` metrics x ``--points`` steps through MLflow's client, then reads it with
``read_record(location, format="mlflow")``, ``--repeat`` times, each time after MLflow's own client
fetching the same histories and nothing more (the floor).  Reported: both times, the
number of metric-history requests the server answered per read (from its access log) and the
largest page, and whether every point came back.

Usage::

    python benchmarks/mlflow_read.py [--points 100000] [--metrics 2] [--repeat 3] [--output FILE]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

_HISTORY_REQUEST = re.compile(r'"GET /api/2\.0/mlflow/metrics/get-history\?[^"]*max_results=(\d+)')


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _start_server(folder: Path) -> tuple[subprocess.Popen, str, Path]:
    port = _free_port()
    log = folder / "server.log"
    mlflow = shutil.which("mlflow", path=os.path.dirname(sys.executable)) or "mlflow"
    process = subprocess.Popen(
        [mlflow, "server", "--host", "127.0.0.1", "--port", str(port), "--workers", "1",
         "--backend-store-uri", f"sqlite:///{folder / 'mlflow.db'}", "--default-artifact-root", str(folder / "art")],
        stdout=log.open("wb"), stderr=subprocess.STDOUT, cwd=folder,
    )
    uri = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(f"{uri}/health", timeout=2):
                return process, uri, log
        except OSError:
            time.sleep(0.5)
    process.terminate()
    raise SystemExit("mlflow server did not start")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--points", type=int, default=100_000)
    parser.add_argument("--metrics", type=int, default=2)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--output", default=None)
    args = parser.parse_args(argv)

    from mlflow.entities import Metric
    from mlflow.tracking import MlflowClient

    from airflow_metric_gate.records import read_record

    folder = Path(tempfile.mkdtemp(prefix="mlflow-bench-"))
    process, uri, log = _start_server(folder)
    try:
        client = MlflowClient(tracking_uri=uri)
        run_id = client.create_run(client.create_experiment("bench")).info.run_id
        now = int(time.time() * 1000)
        started = time.perf_counter()
        for m in range(args.metrics):
            batch = [Metric(f"train/metric_{m}", 0.5 + 0.001 * (s % 1000), now + s, s) for s in range(args.points)]
            for start in range(0, len(batch), 1000):
                client.log_batch(run_id, metrics=batch[start:start + 1000])
        client.set_terminated(run_id)
        logged = time.perf_counter() - started
        location = f"runs:/{run_id}?tracking_uri={uri}"
        seconds, floor, requests, pages, complete = [], [], [], [], True
        for _ in range(args.repeat):
            start = time.perf_counter()  # the floor: MLflow's own client fetching the same histories, nothing more
            for m in range(args.metrics):
                client.get_metric_history(run_id, f"train/metric_{m}")
            floor.append(time.perf_counter() - start)
            before = _HISTORY_REQUEST.findall(log.read_text(errors="replace"))
            start = time.perf_counter()
            record = read_record(location, format="mlflow")
            seconds.append(time.perf_counter() - start)
            time.sleep(0.5)  # the access log is written after the response
            made = _HISTORY_REQUEST.findall(log.read_text(errors="replace"))[len(before):]
            requests.append(len(made))
            pages.append(max(map(int, made), default=0))
            expected = list(range(args.points))
            complete = complete and all(
                [step for step, _ in record[f"train/metric_{m}"]] == expected for m in range(args.metrics)
            )
    finally:
        process.terminate()
        process.wait(timeout=30)
        shutil.rmtree(folder, ignore_errors=True)
    figures = {
        "points_per_metric": args.points, "metrics": args.metrics, "log_seconds": logged,
        "read_seconds": seconds, "client_history_seconds": floor, "read_vs_client": min(seconds) / min(floor),
        "history_requests_per_read": requests, "max_results_per_request": max(pages),
        "every_point_read": complete,
    }
    print(f"{args.metrics} metric(s) x {args.points:,} points logged in {logged:.1f} s")
    print(f"read: best {min(seconds):.2f} s over {args.repeat} (MLflow's client alone, fetching the same histories: "
          f"{min(floor):.2f} s); {requests[0]} history request(s) per read, at most {max(pages):,} points each; "
          f"every point read: {complete}")
    if args.output:
        Path(args.output).write_text(json.dumps(figures, indent=2))
    return 0 if complete else 1


if __name__ == "__main__":
    sys.exit(main())
