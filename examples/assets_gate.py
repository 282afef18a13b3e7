"""The gate scheduled on the training job's Asset; a trusted night emits the series' "gated metrics" Asset.

A run created by the training output's event is a baseline run (not refused for having no
logical date): its night comes from the event (``event_night``: the partition key of a
partitioned asset, else the extra's ``night``).  ``gated_asset`` adds ``publish_gated_metrics``,
which emits the gated metrics event, with the verdict's identity and counts in its extra, only on
a trusted night.  ``approval=True`` adds ``approve_night``: a failing night or a level shift asks
on-call to accept the new level, trust the night or keep it untrusted.
"""

from __future__ import annotations

# [START complete]
import pendulum
from airflow.sdk import DAG, Asset, Param

from airflow_metric_gate import metric_gate
from airflow_metric_gate.operators.assets import event_night, gated_metrics_asset

TRAINING_OUTPUT = Asset(uri="file:///data/training/nightly/rl-7b", name="rl-7b-training-output")
GATED = gated_metrics_asset("rl-7b", suite="nightly-8xh100")

GATES = [
    {"metric_key": "rollout/raw_reward", "steps": "all", "constraint": {"rel_up": 0.2, "rel_down": 0.2}},
    {"metric_key": "train/grad_norm"},
]

with DAG(
    dag_id="assets_metric_gate",
    schedule=[TRAINING_OUTPUT],
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    catchup=False,
    params={"record_root": Param("/data/training/nightly", type="string")},
    user_defined_macros={"event_night": event_night},
    tags=["metric-gate"],
) as dag:
    metric_gate(
        series="rl-7b",
        suite="nightly-8xh100",
        path="{{ params.record_root }}/{{ event_night(triggering_asset_events, dag_run) }}",
        gates=GATES,
        policy="calibrated",
        gated_asset=GATED,
        approval=True,
        poke_interval=5,
    )
# [END complete]
