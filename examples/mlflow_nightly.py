"""Gate a trainer's MLflow run: the night's run is the one its job tagged with the night.

The training job logs to the tracking server, into the experiment ``experiment``, a run tagged
``night=<YYYY-MM-DD>``.  The sensor waits until that run is FINISHED (a FAILED or KILLED run fails
the task at once), then the gate reads every point of every metric from MLflow's paginated
metric history.
"""

from __future__ import annotations

import pendulum
from airflow.sdk import DAG, Param

from airflow_metric_gate.task_groups import metric_gate

# [START dag]
GATES = [
    {"metric_key": "rollout/raw_reward", "steps": "all", "constraint": {"rel_up": 0.2, "rel_down": 0.2}},
    {"metric_key": "train/grad_norm"},
]

with DAG(
    dag_id="gate_mlflow_nightly",
    schedule="@daily",
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    catchup=False,
    params={
        "experiment": Param("rl-7b-nightly", type="string"),
        "tracking_uri": Param("http://mlflow:5000", type="string"),
        "role": Param("auto", enum=["auto", "baseline", "shadow"]),
    },
    tags=["metric-gate"],
):
    metric_gate(
        series="rl-7b",
        suite="nightly-8xh100",
        path="experiments:/{{ params.experiment }}?tag.night={{ ds }}&tracking_uri={{ params.tracking_uri }}",
        format="mlflow",
        gates=GATES,
        policy="calibrated",
        role="{{ params.role }}",
        poke_interval=60,
    )
# [END dag]
