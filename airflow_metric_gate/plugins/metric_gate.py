"""The Airflow plugin that adds the "Metric gate" view to the Airflow 3 UI (Airflow 3.1+).

Registered through the package's ``airflow.plugins`` entry point, so installing the package is
enough.  It contributes:

* a FastAPI app, served by the api-server under :data:`URL_PREFIX`;
* a navigation entry (``Browse`` > ``Metric gate``) showing the series the user may read;
* a "Metric gate" tab on every task-instance page, showing the verdict of an
  ``EvaluateGateOperator`` task (other tasks get a one-line note).

The external views' ``href`` are relative (no leading slash), so they resolve against the UI's
base URL and work behind a URL prefix (``[api] base_url``).
"""

from __future__ import annotations

from airflow.plugins_manager import AirflowPlugin

from airflow_metric_gate.plugins.app import create_app

#: Where the api-server mounts the app.
URL_PREFIX = "/metric-gate"

_TASK_HREF = "metric-gate/task?dag_id={DAG_ID}&run_id={RUN_ID}&task_id={TASK_ID}&map_index={MAP_INDEX}"


class MetricGatePlugin(AirflowPlugin):
    """The "Metric gate" UI: series history and the verdict of each evaluate task."""

    name = "metric_gate"
    fastapi_apps = [{"app": create_app(), "url_prefix": URL_PREFIX, "name": "Metric gate"}]
    external_views = [
        {
            "name": "Metric gate",
            "href": "metric-gate/",
            "destination": "nav",
            "category": "browse",
            "url_route": "metric-gate",
        },
        {
            "name": "Metric gate",
            "href": _TASK_HREF,
            "destination": "task_instance",
            "url_route": "metric-gate-task",
        },
    ]
