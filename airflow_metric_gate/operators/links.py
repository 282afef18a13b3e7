"""The "Metric gate" extra link of the evaluate task, and the address of its Metric gate tab.

The tab is the plugin's task-instance view (``url_route`` ``metric-gate-task``), which the Airflow
UI serves at ``<base_url>/dags/<dag>/runs/<run>/tasks/<task>[/mapped/<i>]/plugin/metric-gate-task``.
Notifications link there too.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any
from urllib.parse import quote

from airflow.sdk import BaseOperatorLink

if TYPE_CHECKING:
    from airflow.models.taskinstancekey import TaskInstanceKey
    from airflow.sdk import BaseOperator

#: The plugin's task-instance view route (see :mod:`airflow_metric_gate.plugins.metric_gate`).
TAB_ROUTE = "metric-gate-task"


def base_url() -> str:
    """The Airflow UI's address: ``[api] base_url`` (default ``http://localhost:8080``), without a trailing slash."""
    from airflow.sdk.configuration import conf

    return (conf.get("api", "base_url", fallback=None) or "http://localhost:8080").rstrip("/")


def metric_gate_tab_url(dag_id: str, run_id: str, task_id: str, map_index: int | None = -1,
                        *, base: str | None = None) -> str:
    """Return the address of a task instance's Metric gate tab.

    :param dag_id: the DAG.
    :param run_id: the DAG run.
    :param task_id: the evaluate task (its full id, group prefix included).
    :param map_index: the map index (-1 or ``None``: not mapped).
    :param base: the UI's address; default :func:`base_url`.
    """
    root = (base if base is not None else base_url()).rstrip("/")
    path = f"/dags/{quote(dag_id, safe='')}/runs/{quote(run_id, safe='')}/tasks/{quote(task_id, safe='')}"
    if map_index is not None and map_index >= 0:
        path += f"/mapped/{map_index}"
    return f"{root}{path}/plugin/{TAB_ROUTE}"


class MetricGateTabLink(BaseOperatorLink):
    """The evaluate task's extra link "Metric gate": its verdict, charts and actions in the UI."""

    name = "Metric gate"

    def get_link(self, operator: BaseOperator, *, ti_key: TaskInstanceKey | Any) -> str:
        """Return the task instance's Metric gate tab.

        :param operator: the evaluate operator.
        :param ti_key: the task instance (its key or the running instance).
        """
        return metric_gate_tab_url(ti_key.dag_id, ti_key.run_id, ti_key.task_id, getattr(ti_key, "map_index", -1))


__all__ = ["TAB_ROUTE", "MetricGateTabLink", "base_url", "metric_gate_tab_url"]
