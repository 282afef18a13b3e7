"""One DAG gating several training series: the ``metric_gate`` task group mapped over the series identities.

Each series writes its night's record under ``<record_root>/<series>/<YYYY-MM-DD>``.  A first task
lists the series identities with the night's record of each; the ``metric_gate`` task group (sensor,
ingest, select, persist, evaluate) is mapped over that list: one store run and one history per
series identity, and one verdict per map index.  Adding a series is one more entry in ``SERIES``.
"""

from __future__ import annotations

# [START complete]
from datetime import timedelta

import pendulum
from airflow.sdk import DAG, Param, task

from airflow_metric_gate import metric_gate

# [START identities]
# One entry per training series: its identity (series, and suite; backend is the default "cuda").
SERIES = [
    {"series": "rl-7b", "suite": "nightly-8xh100"},
    {"series": "rl-70b", "suite": "nightly-64xh100"},
]
# [END identities]

# [START gates]
# The declarations, the same for every series (a dict per declaration, as in a gates file).
GATES = [
    {"metric_key": "rollout/raw_reward", "steps": "all", "constraint": {"rel_up": 0.2, "rel_down": 0.2}},
    {"metric_key": "train/grad_norm"},  # steps and band from the defaults table
]
# [END gates]

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
        return [{**identity, "path": f"{record_root}/{identity['series']}/{night}"} for identity in SERIES]

    # The same for every series in partial(); each series' own arguments from its dict.
    metric_gate.partial(gates=GATES, policy="calibrated", role="{{ params.role }}").expand_kwargs(
        series_to_gate(record_root="{{ params.record_root }}", night="{{ ds }}")
    )
# [END dag]
# [END complete]
