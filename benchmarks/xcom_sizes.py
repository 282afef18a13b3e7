"""XCom bytes per task of one night, at a given number of selected values, before and after references.

Runs the four operators' ``execute`` for three nights of a record selecting ``N`` values (10
metrics, ``steps: all``), on an embedded store: two baseline nights, then a night where every
value regressed (every result FAIL: the largest verdict).  For the last night it reports the
JSON bytes of what each task returns (its XCom ``return_value``), and, beside it, what the
select task pushed before this change (the selection with every value, as
``pipeline.selection_to_payload`` encodes it; the other tasks' payloads were the same less the
record's checksum).  It also counts how often the record is parsed in that night.

    python benchmarks/xcom_sizes.py [--values 1000 100000] [--output FILE]
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import logging
import os
import random
import shutil
import sys
import tempfile
from datetime import datetime, timedelta, timezone
from pathlib import Path

METRICS = 10
CONSTRAINT = {"rel_up": 0.2, "abs_floor_up": 0.01, "rel_down": 0.2, "abs_floor_down": 0.01}
FIRST_NIGHT = datetime(2026, 11, 1, tzinfo=timezone.utc)
TASKS = ("ingest_record", "select_steps", "persist_values", "evaluate_gate")


class _TI:
    task_id, try_number, map_index = "t", 1, -1

    def __init__(self, dag_id: str, night: int) -> None:
        self.dag_id = dag_id
        self.run_id = f"scheduled__night{night}"
        self.pushed: dict = {}

    def xcom_push(self, key, value) -> None:
        self.pushed[key] = value


class _DagRun:
    run_type = "scheduled"

    def __init__(self, night: int) -> None:
        self.logical_date = self.run_after = FIRST_NIGHT + timedelta(days=night)


def _write_record(path: Path, values: int, level: float) -> None:
    rng = random.Random(values)
    per = max(1, values // METRICS)
    with path.open("w") as fh:
        for m in range(METRICS):
            # full float precision, as trainers log their metrics
            series = [[s, level * (1.0 + rng.random() / 1000)] for s in range(per)]
            fh.write(json.dumps({"metric": f"bench/metric_{m:02d}", "series": series}) + "\n")


def _size(value) -> int:
    return len(json.dumps(value).encode())


def measure(values: int, workdir: Path) -> dict:
    """Run three nights at ``values`` selected values; return the last night's XCom bytes per task."""
    from airflow_metric_gate.operators import _record_copy
    from airflow_metric_gate.operators.evaluate import EvaluateGateOperator
    from airflow_metric_gate.operators.ingest import IngestRecordOperator
    from airflow_metric_gate.operators.persist import PersistValuesOperator
    from airflow_metric_gate.operators.select import SelectStepsOperator, reference_declarations
    from airflow_metric_gate.pipeline import selection_to_payload
    from airflow_metric_gate.records import read_record
    from airflow_metric_gate.selection import select_steps

    os.environ["AIRFLOW_CONN_METRIC_GATE_DB"] = f"sqlite:///{workdir / f'store-{values}.db'}"
    gates = [{"metric_key": f"bench/metric_{m:02d}", "steps": "all", "constraint": CONSTRAINT} for m in range(METRICS)]
    parses = {"count": 0}
    real_read = _record_copy.read_record

    def counting_read(*args, **kwargs):
        parses["count"] += 1
        return real_read(*args, **kwargs)

    dag_id = f"xcom_sizes_{values}"
    for night, level in enumerate((1.0, 1.0, 0.5)):
        record = workdir / f"night{night}-{values}.jsonl"
        _write_record(record, values, level)
        ti = _TI(dag_id, night)
        context = {"ti": ti, "dag_run": _DagRun(night), "logical_date": _DagRun(night).logical_date}
        parses["count"] = 0
        _record_copy.read_record = counting_read
        try:
            ingest = IngestRecordOperator(task_id="ingest_record", location=str(record))
            out = {"ingest_record": ingest.execute(context)}
            out["select_steps"] = SelectStepsOperator(
                task_id="select_steps", record=out["ingest_record"], gates=gates).execute(context)
            out["persist_values"] = PersistValuesOperator(
                task_id="persist_values", series="bench", suite="xcom", selection=out["select_steps"]).execute(context)
            EvaluateGateOperator(task_id="evaluate_gate", run=out["persist_values"], min_history=2).execute(context)
            out["evaluate_gate"] = ti.pushed["return_value"]
        finally:
            _record_copy.read_record = real_read
        if night == 1:
            passing_verdict = _size(out["evaluate_gate"])
    reference = out["select_steps"]
    before_select = selection_to_payload(select_steps(read_record(record), reference_declarations(reference)))
    before_select["location"] = str(record)
    before = {
        "ingest_record": _size({k: v for k, v in out["ingest_record"].items() if k != "checksum"}),
        "select_steps": _size(before_select),
        "persist_values": _size(out["persist_values"]),
        "evaluate_gate": _size(out["evaluate_gate"]),
    }
    return {
        "values": METRICS * max(1, values // METRICS),
        "after": {task: _size(out[task]) for task in TASKS},
        "before": before,
        "verdict_passing_night": passing_verdict,
        "verdict_results_fail": out["evaluate_gate"]["counts"]["FAIL"],
        "record_parses_per_night": parses["count"],
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--values", type=int, nargs="+", default=[1_000, 100_000])
    parser.add_argument("--output", help="write the figures as JSON here")
    args = parser.parse_args(argv)
    logging.disable(logging.WARNING)  # the operators' logs (the verdict table) are not the point here
    workdir = Path(tempfile.mkdtemp(prefix="metric-gate-xcom-"))
    with contextlib.redirect_stdout(io.StringIO()):  # Airflow's task logger prints there
        figures = [measure(values, workdir) for values in args.values]
    shutil.rmtree(workdir, ignore_errors=True)
    print("| task | " + " | ".join(f"before, {f['values']:,} values | after, {f['values']:,} values" for f in figures)
          + " |")
    print("|---|" + "---:|---:|" * len(figures))
    for task in TASKS:
        cells = " | ".join(f"{f['before'][task]:,} | {f['after'][task]:,}" for f in figures)
        print(f"| `{task}` | {cells} |")
    for f in figures:
        print(f"{f['values']:,} values: record parsed {f['record_parses_per_night']} time(s) per night; verdict "
              f"{f['verdict_passing_night']:,} bytes on a passing night, {f['after']['evaluate_gate']:,} with "
              f"{f['verdict_results_fail']:,} FAIL results")
    if args.output:
        Path(args.output).write_text(json.dumps(figures, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
