"""One DAG gating several training series: a task group mapped over the series identities.

Each series writes its night's record under ``<record_root>/<series>/<YYYY-MM-DD>``.  A first task
lists the series identities with the night's record of each; the task group (sensor, select,
persist, evaluate) is mapped over that list: one store run and one history per series identity,
and one verdict per map index.  Adding a series is one more entry in ``SERIES``.
"""

from __future__ import annotations

from datetime import timedelta

import pendulum
from airflow.sdk import DAG, Param, task, task_group

from airflow_metric_gate.operators.evaluate import EvaluateGateOperator
from airflow_metric_gate.operators.persist import PersistValuesOperator
from airflow_metric_gate.operators.select import SelectStepsOperator
from airflow_metric_gate.sensors.training_output import TrainingOutputSensor

# [START identities]
# One entry per training series: its identity (series, and suite; backend is the default "cuda").
SERIES = [
    {"series": "rl-7b", "suite": "nightly-8xh100"},
    {"series": "rl-70b", "suite": "nightly-64xh100"},
]
# [END identities]

GATES = [
    {"metric_key": "rollout/raw_reward", "steps": "all", "constraint": {"rel_up": 0.2, "rel_down": 0.2}},
    {"metric_key": "train/grad_norm"},  # steps and band from the defaults table
]

# [START dag]
with DAG(
    dag_id="gate_several_series_mapped",
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

    @task
    def series_to_gate(record_root: str, night: str) -> list[dict]:
        """Each series identity with the location of its record for the night."""
        return [{**identity, "record": f"{record_root}/{identity['series']}/{night}"} for identity in SERIES]

    @task_group
    def gate_series(series: str, suite: str, record: str) -> None:
        wait = TrainingOutputSensor(task_id="wait_for_record", path=record, mode="reschedule", poke_interval=300,
                                    timeout=timedelta(hours=8).total_seconds())
        select = SelectStepsOperator(task_id="select_steps", record=wait.output, gates=GATES)
        persist = PersistValuesOperator(task_id="persist_values", selection=select.output, series=series,
                                        suite=suite, role="{{ params.role }}")
        EvaluateGateOperator(task_id="evaluate_gate", run=persist.output, enforce=True)

    gate_series.expand_kwargs(series_to_gate(record_root="{{ params.record_root }}", night="{{ ds }}"))
# [END dag]
