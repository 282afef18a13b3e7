"""Ingest from object storage against local disk, and bytes read from the storage per night.

Starts a local S3 server (moto, from the ``test`` extra) on a free loopback port, writes the same
record (100,000 points in 8 objects, series format) to it and to a local folder, then measures:

* ingest time (read and validate) from local disk and from S3 through an Airflow ``aws``
  connection, best of ``--repeat``;
* bytes fetched from S3 per night by ``IngestRecordOperator``, ``SelectStepsOperator`` (which
  reads nothing: it passes a reference) and ``PersistValuesOperator``, with persist re-using
  ingest's verified local copy, and with persist reading the storage again (no copy: what it
  costs when persist runs on another machine than ingest).

    python benchmarks/object_storage.py [--points 100000] [--files 8] [--repeat 3] [--output FILE]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

CONN_ID = "bench_s3"


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _start_server() -> tuple[subprocess.Popen, str]:
    port = _free_port()
    endpoint = f"http://127.0.0.1:{port}"
    process = subprocess.Popen(
        [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 30
    while True:
        try:
            urllib.request.urlopen(f"{endpoint}/moto-api/data.json", timeout=1).close()
            return process, endpoint
        except OSError:
            if process.poll() is not None or time.monotonic() > deadline:
                process.kill()
                raise SystemExit(f"the moto S3 server did not start on {endpoint}") from None
            time.sleep(0.1)


def _record_files(points: int, files: int, metrics: int = 100) -> dict[str, bytes]:
    """One series-format record split over ``files`` ranks (steps dealt round-robin)."""
    per = points // metrics
    out = {}
    for rank in range(files):
        lines = []
        for m in range(metrics):
            series = [[s, 1.0 + 0.001 * ((s * 7919 + m) % 1000)] for s in range(rank, per, files)]
            lines.append(json.dumps({"metric": f"bench/metric_{m:03d}", "series": series}))
        out[f"rank{rank}.jsonl"] = ("\n".join(lines) + "\n").encode()
    return out


class _TI:
    dag_id, run_id, task_id, try_number, map_index = "bench_s3", "scheduled__night", "t", 1, -1

    def __init__(self, upstream=None) -> None:
        self.upstream = upstream

    def xcom_pull(self, task_ids, map_indexes=-1, key="return_value"):
        return self.upstream


class _DagRun:
    run_type = "scheduled"

    def __init__(self) -> None:
        from datetime import datetime, timezone

        self.logical_date = self.run_after = datetime(2026, 11, 30, tzinfo=timezone.utc)


def _context(upstream=None) -> dict:
    dag_run = _DagRun()
    return {"ti": _TI(upstream), "dag_run": dag_run, "logical_date": dag_run.logical_date}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--points", type=int, default=100_000)
    parser.add_argument("--files", type=int, default=8)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--output", help="write the figures as JSON here")
    args = parser.parse_args(argv)

    process, endpoint = _start_server()
    try:
        import boto3

        secret = "bench-secret"
        client = boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1",
                              aws_access_key_id="bench", aws_secret_access_key=secret)
        client.create_bucket(Bucket="bench")
        files = _record_files(args.points, args.files)
        workdir = Path(tempfile.mkdtemp(prefix="metric-gate-bench-"))
        local = workdir / "night"
        local.mkdir()
        for name, body in files.items():
            client.put_object(Bucket="bench", Key=f"night/{name}", Body=body)
            (local / name).write_bytes(body)
        client.put_object(Bucket="bench", Key="night/_SUCCESS", Body=b"")
        os.environ[f"AIRFLOW_CONN_{CONN_ID.upper()}"] = json.dumps(
            {"conn_type": "aws", "login": "bench", "password": secret,
             "extra": {"endpoint_url": endpoint, "region_name": "us-east-1"}}
        )
        os.environ["AIRFLOW__METRIC_GATE__RECORD_COPY_DIR"] = str(workdir / "copies")
        os.environ["AIRFLOW_CONN_METRIC_GATE_DB"] = f"sqlite:///{workdir / 'store.db'}"

        from airflow.providers.standard.operators.empty import EmptyOperator
        from airflow.sdk import DAG
        from s3fs.core import S3File

        from airflow_metric_gate.operators.ingest import IngestRecordOperator
        from airflow_metric_gate.operators.persist import PersistValuesOperator
        from airflow_metric_gate.operators.select import SelectStepsOperator
        from airflow_metric_gate.records import read_record
        from airflow_metric_gate.storage import record_path, refresh

        uri = f"s3://{CONN_ID}@bench/night"
        record_bytes = sum(len(b) for b in files.values())

        def timed(fn) -> float:
            best = float("inf")
            for _ in range(args.repeat):
                start = time.perf_counter()
                fn()
                best = min(best, time.perf_counter() - start)
            return best

        def from_s3() -> None:
            path = record_path(uri)
            refresh(path)
            read_record(path)

        from_s3()  # warm up: the connection, the filesystem instance
        local_s = timed(lambda: read_record(local))
        s3_s = timed(from_s3)

        fetched = {"bytes": 0}
        fetch = S3File._fetch_range

        def counting(self, start, end):
            data = fetch(self, start, end)
            fetched["bytes"] += len(data)
            return data

        S3File._fetch_range = counting
        with DAG(dag_id="bench_s3", schedule=None):
            gate = {"metric_key": "bench/metric_000", "steps": "all", "constraint": {"rel_up": 0.5, "rel_down": 0.5}}
            select = SelectStepsOperator(task_id="select_steps", gates=[gate])
            EmptyOperator(task_id="ingest_record") >> select
        ingest = IngestRecordOperator(task_id="ingest_record", location=uri)

        def night(with_copy: bool) -> int:
            fetched["bytes"] = 0
            summary = ingest.execute(_context())
            if not with_copy:  # persist on another machine: no copy there
                shutil.rmtree(workdir / "copies", ignore_errors=True)
            reference = select.execute(_context(summary))
            PersistValuesOperator(task_id="persist_values", series="bench", selection=reference).execute(_context())
            return fetched["bytes"]

        with_copy = night(True)
        without_copy = night(False)
        S3File._fetch_range = fetch
    finally:
        process.terminate()
        process.wait(timeout=10)

    figures = {
        "points": args.points,
        "objects": args.files,
        "record_bytes": record_bytes,
        "ingest_local_disk_s": round(local_s, 4),
        "ingest_s3_s": round(s3_s, 4),
        "ingest_s3_vs_local": round(s3_s / local_s, 2),
        "bytes_read_per_night_persist_reads_storage": without_copy,
        "bytes_read_per_night_persist_reads_copy": with_copy,
    }
    width = max(map(len, figures))
    for key, value in figures.items():
        print(f"{key:<{width}}  {value}")
    if args.output:
        Path(args.output).write_text(json.dumps(figures, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
