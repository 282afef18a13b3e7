"""Gate a trainer's TensorBoard logs: one run folder of event files per night.

The trainer (PyTorch's ``SummaryWriter``, tensorboardX, Lightning's ``TensorBoardLogger``, ...)
writes its event files into ``<log_root>/<night>/`` and, once done, an empty ``_SUCCESS`` file
there.  Every rank's event file is read, every scalar of every tag, each record's CRCs checked.
"""

from __future__ import annotations

import pendulum
from airflow.sdk import DAG, Param

from airflow_metric_gate.task_groups import metric_gate

# [START dag]
GATES = [
    {"metric_key": "rollout/raw_reward", "steps": "all", "constraint": {"rel_up": 0.2, "rel_down": 0.2}},
    {"metric_key": "train/grad_norm"},  # steps and band from the defaults table
]

with DAG(
    dag_id="gate_tensorboard_nightly",
    schedule="@daily",
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    catchup=False,
    params={
        "log_root": Param("/data/tensorboard/rl-7b", type="string"),
        "role": Param("auto", enum=["auto", "baseline", "shadow"]),
    },
    tags=["metric-gate"],
):
    metric_gate(
        series="rl-7b",
        suite="nightly-8xh100",
        path="{{ params.log_root }}/{{ ds }}",
        format="tensorboard",
        gates=GATES,
        policy="calibrated",
        role="{{ params.role }}",
    )
# [END dag]
