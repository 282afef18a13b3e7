"""Two gate chains in one DAG run: series ``rl-7b`` and ``rl-70b``, each with its own record.

Used by the system test (``tests/system``): every night, each chain ingests the record of its own
series (``<record_root>/<series>/<YYYY-MM-DD>``), selects, persists and evaluates it.  The two
chains share the DAG run, so the store must keep two runs (one per series) and two histories.
Its tasks retry as the packaged DAG's do (a task a loaded worker lost is tried again, and its write
must replace its own rows, never add to them).
"""

from __future__ import annotations

from datetime import timedelta

import pendulum
from airflow.sdk import DAG, Param

from airflow_metric_gate.operators.evaluate import EvaluateGateOperator
from airflow_metric_gate.operators.ingest import IngestRecordOperator
from airflow_metric_gate.operators.persist import PersistValuesOperator
from airflow_metric_gate.operators.select import SelectStepsOperator

SERIES = ("rl-7b", "rl-70b")

with DAG(
    dag_id="two_series_gate",
    schedule="@daily",
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    catchup=False,
    max_active_runs=1,
    tags=["metric-gate", "system-test"],
    params={"record_root": Param("/data/training", type="string")},
    default_args={"retries": 2, "retry_delay": timedelta(seconds=5)},
) as dag:
    for series in SERIES:
        slug = series.replace("-", "_")
        ingest = IngestRecordOperator(
            task_id=f"ingest_{slug}",
            location="{{ params.record_root }}/" + series + "/{{ ds }}",
        )
        select = SelectStepsOperator(
            task_id=f"select_{slug}",
            record=ingest.output,
            gates_file="gates/two_series_gate.yaml",
        )
        persist = PersistValuesOperator(
            task_id=f"persist_{slug}",
            selection=select.output,
            series=series,
            suite="nightly-system",
        )
        EvaluateGateOperator(task_id=f"evaluate_{slug}", run=persist.output, enforce=True)
