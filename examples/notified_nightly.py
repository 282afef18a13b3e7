"""The nightly gate that tells on-call: Slack and email notifiers on the ``metric_gate`` task group.

A blocking regression fails ``evaluate_gate``, and its failure callbacks send the verdict's summary
(the "REGRESSED ..." lines, counts, level shifts and drift, who must act) with a link to the task
instance's Metric gate tab.  A night that passes with warnings (``severity: warn``, a level shift,
a drift) sends a warning; a quiet night sends nothing.  The webhook token and the SMTP login live
in the two Airflow connections, never in this file.
"""

from __future__ import annotations

# [START complete]
import pendulum
from airflow.sdk import DAG, Param

from airflow_metric_gate import metric_gate
from airflow_metric_gate.notifications.slack import MetricGateSlackNotifier
from airflow_metric_gate.notifications.smtp import MetricGateEmailNotifier

GATES = [
    {"metric_key": "rollout/raw_reward", "steps": "all", "constraint": {"rel_up": 0.2, "rel_down": 0.2}},
    {"metric_key": "train/grad_norm"},
]

# [START notifiers]
NOTIFIERS = [
    MetricGateSlackNotifier(slack_webhook_conn_id="metric_gate_slack", on_call="@rl-oncall"),
    MetricGateEmailNotifier(to="rl-oncall@example.com", smtp_conn_id="metric_gate_smtp",
                            from_email="metric-gate@example.com", on_call="@rl-oncall"),
]
# [END notifiers]

with DAG(
    dag_id="notified_nightly_gate",
    schedule="@daily",
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    catchup=False,
    params={
        "record_root": Param("/data/training/nightly", type="string"),
        "role": Param("auto", enum=["auto", "baseline", "shadow"]),
    },
    tags=["metric-gate"],
):
    metric_gate(
        series="rl-7b",
        suite="nightly-8xh100",
        path="{{ params.record_root }}/{{ ds }}",
        gates=GATES,
        policy="calibrated",
        role="{{ params.role }}",
        notifiers=NOTIFIERS,
    )
# [END complete]
