"""Downstream of the gate: promote the checkpoint of each trusted night (scheduled on the gated metrics Asset)."""

from __future__ import annotations

# [START complete]
import pendulum
from airflow.sdk import DAG, task

from airflow_metric_gate.operators.assets import gated_metrics_asset

GATED = gated_metrics_asset("rl-7b", suite="nightly-8xh100")

with DAG(
    dag_id="assets_promote_checkpoint",
    schedule=[GATED],
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    catchup=False,
    tags=["metric-gate"],
) as dag:

    @task
    def promote(*, triggering_asset_events=None) -> dict:
        """Read which night passed the gate from the event's extra, and promote its checkpoint."""
        (event, *_) = triggering_asset_events[GATED]
        night = event.extra
        print(f"promoting the checkpoint of {night['series']} night {night['night']} "
              f"(store run {night['run_id']}, counts {night['counts']})")
        return {"promoted": night["night"], "run_id": night["run_id"], "counts": night["counts"]}

    promote()
# [END complete]
