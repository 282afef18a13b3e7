"""Gate a trainer's CSV log: Lightning's ``CSVLogger`` output (``metrics.csv``), one version folder per night.

The trainer writes ``<log_root>/<night>/metrics.csv`` (and ``hparams.yaml``, which is skipped) and,
once done, an empty ``_SUCCESS`` file there.  Every logged cell is a point at its row's step.
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
    dag_id="gate_csv_nightly",
    schedule="@daily",
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    catchup=False,
    params={
        "log_root": Param("/data/lightning_logs/rl-7b", type="string"),
        "role": Param("auto", enum=["auto", "baseline", "shadow"]),
    },
    tags=["metric-gate"],
):
    metric_gate(
        series="rl-7b",
        suite="nightly-8xh100",
        path="{{ params.log_root }}/{{ ds }}",
        format="csv",
        gates=GATES,
        policy="calibrated",
        role="{{ params.role }}",
    )
# [END dag]
