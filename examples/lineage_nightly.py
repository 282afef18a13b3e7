"""The nightly gate with OpenLineage: install the ``openlineage`` extra and configure a transport.

Nothing in the DAG changes: with the OpenLineage provider installed, ``evaluate_gate`` reports
the store's ``metric_values`` table as its output dataset, with a ``dataQualityAssertions`` facet
holding one assertion per declaration (passed or not), when it succeeds and when it fails.
"""

from __future__ import annotations

# [START complete]
import pendulum
from airflow.sdk import DAG, Param

from airflow_metric_gate import metric_gate

GATES = [
    {"metric_key": "rollout/raw_reward", "steps": "all", "constraint": {"rel_up": 0.2, "rel_down": 0.2}},
    {"metric_key": "train/grad_norm"},
]

with DAG(
    dag_id="lineage_nightly_gate",
    schedule="@daily",
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    catchup=False,
    params={
        "record_root": Param("/data/training/nightly", type="string"),
        "role": Param("auto", enum=["auto", "baseline", "shadow"]),
    },
    tags=["metric-gate"],
):
    metric_gate(series="rl-7b", suite="nightly-8xh100", path="{{ params.record_root }}/{{ ds }}", gates=GATES,
                policy="calibrated", role="{{ params.role }}")
# [END complete]
