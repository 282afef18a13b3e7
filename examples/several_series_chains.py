"""One DAG gating several training series: one explicit chain of tasks per series.

The same job as ``several_series_mapped.py``, written as a loop that builds one chain per series
(task ids ``<task>_<series>``).  Each chain has its own series identity, store run and history;
one series regressing fails only its own ``evaluate_gate_<series>`` task.
"""

from __future__ import annotations

from datetime import timedelta

import pendulum
from airflow.sdk import DAG, Param

from airflow_metric_gate.operators.evaluate import EvaluateGateOperator
from airflow_metric_gate.operators.persist import PersistValuesOperator
from airflow_metric_gate.operators.select import SelectStepsOperator
from airflow_metric_gate.sensors.training_output import TrainingOutputSensor

# [START series]
SERIES = {"rl-7b": "nightly-8xh100", "rl-70b": "nightly-64xh100"}  # series -> suite

GATES = [
    {"metric_key": "rollout/raw_reward", "steps": "all", "constraint": {"rel_up": 0.2, "rel_down": 0.2}},
    {"metric_key": "train/grad_norm"},  # steps and band from the defaults table
]
# [END series]

# [START dag]
with DAG(
    dag_id="gate_several_series_chains",
    schedule="@daily",
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    catchup=False,
    default_args={"retries": 3, "retry_delay": timedelta(minutes=5)},
    params={
        "record_root": Param("/data/training/nightly", type="string"),
        "role": Param("auto", enum=["auto", "baseline", "shadow"]),
    },
    tags=["metric-gate"],
):
    for series, suite in SERIES.items():
        wait = TrainingOutputSensor(task_id=f"wait_for_record_{series}",
                                    path="{{ params.record_root }}/" + series + "/{{ ds }}",
                                    mode="reschedule", poke_interval=300, timeout=timedelta(hours=8).total_seconds())
        select = SelectStepsOperator(task_id=f"select_steps_{series}", record=wait.output, gates=GATES,
                                     policy="calibrated")
        persist = PersistValuesOperator(task_id=f"persist_values_{series}", selection=select.output, series=series,
                                        suite=suite, role="{{ params.role }}")
        EvaluateGateOperator(task_id=f"evaluate_gate_{series}", run=persist.output, enforce=True)
# [END dag]
