"""A deferrable ``TrainingOutputSensor`` alone, for the system test (``tests/system``).

Triggered with ``conf={"record_path": ...}``: the sensor checks once on the worker, defers to the
triggerer while the record is incomplete, and resumes on a worker once the trigger fires.
"""

from __future__ import annotations

import pendulum
from airflow.sdk import DAG, Param

from airflow_metric_gate.sensors.training_output import TrainingOutputSensor

with DAG(
    dag_id="deferred_record_sensor",
    schedule=None,
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    catchup=False,
    tags=["metric-gate", "system-test"],
    params={"record_path": Param("/data/training/record", type="string")},
) as dag:
    TrainingOutputSensor(
        task_id="wait_for_record",
        path="{{ params.record_path }}",
        deferrable=True,
        poke_interval=1,
        timeout=600,
    )
