"""The nightly metric gate with its five operators composed by hand, without the task group.

The same tasks, arguments and wiring as the packaged nightly DAG
(``airflow_metric_gate/example_dags/nightly_metric_gate.py``), which builds them with one call of
``metric_gate``; here the task ids carry no group prefix.  Start from this file to change what the
task group does not offer (another operator argument, a task between two steps).  It reads
``gates/nightly_metric_gate.yaml`` beside it: copy that file from the package along with this one.
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
### Nightly metric gate, composed by hand

The nightly metric gate of the package, with its five operators written out: wait for the
night's record, ingest it, select the steps the gates file asks for, persist them in the metric
store and evaluate them against the history of the series identity.
"""

# The night's date: the `night` param, else the run's logical date (a manual run may have none).
NIGHT = "{{ params.night or (dag_run.logical_date or dag_run.run_after) | ds }}"

# [START dag]
with DAG(
    dag_id="nightly_metric_gate_by_hand",
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
