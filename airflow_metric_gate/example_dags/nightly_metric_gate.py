"""Nightly metric gate: wait for the training record, then ingest, select, persist and evaluate it.

Copy this file (and ``gates/nightly_metric_gate.yaml`` beside it) into your DAGs folder and adjust
the params, or trigger it with other params for a one-off run.
"""

from __future__ import annotations

from datetime import timedelta

import pendulum
from airflow.sdk import DAG, Param

from airflow_metric_gate.operators.evaluate import EvaluateGateOperator
from airflow_metric_gate.operators.ingest import IngestRecordOperator
from airflow_metric_gate.operators.persist import PersistValuesOperator
from airflow_metric_gate.operators.select import SelectStepsOperator
from airflow_metric_gate.sensors.training_output import TrainingOutputSensor

DOC_MD = """
### Nightly metric gate

Every night the training job writes its metrics under `<record_root>/<YYYY-MM-DD>` (a JSON Lines
file or a directory of them) and a `_SUCCESS` marker when done. This DAG waits for that record,
selects the steps each gate in `gates_file` asks for, stores them in the metric store (Airflow
connection `metric_gate_db`, type postgres) and compares each value with the history of the same
metric, declaration and step.

**Roles.** Scheduled runs are *baseline* runs: when trusted they feed future baselines, and an
enforced FAIL or ERROR fails `evaluate_gate`. Manual runs are *shadow* runs: stored and reported,
never failed by a regression, never feeding baselines. The `role` param overrides this.
A run triggered without a logical date (`airflow dags trigger`) gates the night in the `night`
param; a baseline run needs one: `--conf '{"night": "2026-11-30", "role": "baseline"}'`.

#### When this DAG fails

* `wait_for_record`: no complete record in time. The message says whether the record or its
  `_SUCCESS` marker is missing. Check the training job; clear the task once the output is there.
* `ingest_record` or `select_steps`: the record or the gates file is malformed; the message names
  file and line. Fix the input, then clear the task (bad input is not retried).
* `persist_values` or `evaluate_gate` up for retry: the metric store is unreachable. Nothing was
  half-written; check the `metric_gate_db` database, retries resume on their own.
* `evaluate_gate` failed: **a regression**, an enforced value left its band. Read on.

For a regression, open the `evaluate_gate` log. Its first lines say what regressed, one line per
failing declaration, worst first:

    REGRESSED <metric> (steps <steps>): <f> of <n> steps FAIL, steps <first>..<last>, below band,
    worst step <step>: <value> vs baseline <ref> (<change>; band <lo>..<hi>)

Then one line sums the run up (grep `metric-gate:`):

    metric-gate: <series> run <id>: NOT-TRUSTED (<n> results, <f> fail, <e> error)

Below it, a table lists the worst FAILs of each declaration (value, baseline mean of the last
trusted nights, band, which side it left and whether the relative term or the absolute floor set
that side) and each ERROR (a metric missing from the record, a duplicate step, a non-finite
value...). The full verdict is the task's XCom `return_value` (JSON, `schema`
`airflow-metric-gate/verdict/v1`); `metric-gate show <store run id> --all` lists every result.

* A real regression: leave the run untrusted (it will not poison future baselines) and raise it
  with the training team.
* A false alarm, or an intended change: mark the run trusted
  (`metric-gate mark-trusted --run-id <store run id>`, the id is in the summary line) or
  allowlist the declaration in the gates file with a reason.
* ERROR results usually mean the record changed shape (renamed metric, new logging cadence).

Clearing a task re-runs it in place: rows are keyed on the Airflow run, never duplicated.
Clear `persist_values` together with its downstream `evaluate_gate` so the night is judged again;
a re-persisted night stays `pending` (feeding no baseline) until it is evaluated.
"""

# The night's date: the `night` param, else the run's logical date (a manual run may have none).
NIGHT = "{{ params.night or (dag_run.logical_date or dag_run.run_after) | ds }}"

# [START dag]
with DAG(
    dag_id="nightly_metric_gate",
    description="Gate nightly training metrics against the history of each coordinate",
    schedule="@daily",
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    catchup=False,
    max_active_runs=1,
    doc_md=DOC_MD,
    tags=["metric-gate", "ml"],
    default_args={"retries": 3, "retry_delay": timedelta(minutes=5), "retry_exponential_backoff": True},
    params={
        "record_root": Param(
            "/data/training/nightly",
            type="string",
            description="Folder or object-storage URI (s3://..., gs://..., file://...) holding one "
            "record per night, named YYYY-MM-DD.",
        ),
        "night": Param(
            "",
            type="string",
            description="Night to gate (YYYY-MM-DD); empty: the run's logical date.",
        ),
        "gates_file": Param(
            "gates/nightly_metric_gate.yaml",
            type="string",
            description="Gates file (YAML, JSON, or Python with register_ci_gate calls); relative "
            "paths start at this DAG file's folder.",
        ),
        "series": Param("rl-finetune", type="string", description="Training job whose nights are comparable."),
        "backend": Param("cuda", type="string", description="Hardware backend."),
        "suite": Param("nightly-8xh100", type="string", description="Schedule or cluster."),
        "role": Param(
            "auto",
            enum=["auto", "baseline", "shadow"],
            description="auto: scheduled runs are baseline, manual runs shadow.",
        ),
    },
) as dag:
    # [END dag]
    # [START pipeline]
    # [START sensor]
    wait_for_record = TrainingOutputSensor(
        task_id="wait_for_record",
        path="{{ params.record_root }}/" + NIGHT,
        deferrable=True,
        poke_interval=300,
        timeout=timedelta(hours=8).total_seconds(),
    )
    # [END sensor]
    # [START ingest]
    ingest_record = IngestRecordOperator(task_id="ingest_record", location=wait_for_record.output)
    # [END ingest]
    # [START select]
    select_steps = SelectStepsOperator(
        task_id="select_steps",
        record=ingest_record.output,
        gates_file="{{ params.gates_file }}",
    )
    # [END select]
    # [START persist]
    persist_values = PersistValuesOperator(
        task_id="persist_values",
        selection=select_steps.output,
        series="{{ params.series }}",
        backend="{{ params.backend }}",
        suite="{{ params.suite }}",
        role="{{ params.role }}",
        night="{{ params.night }}",
    )
    # [END persist]
    # [START evaluate]
    evaluate_gate = EvaluateGateOperator(task_id="evaluate_gate", run=persist_values.output, enforce=True)
    # [END evaluate]
    # [END pipeline]
