"""The package registers its UI plugin the way Airflow 3.1+ discovers and mounts it."""

from __future__ import annotations

from importlib.metadata import entry_points


def test_the_plugin_is_an_airflow_plugins_entry_point():
    found = [ep for ep in entry_points(group="airflow.plugins") if ep.name == "metric_gate"]
    assert [ep.value for ep in found] == ["airflow_metric_gate.plugins.metric_gate:MetricGatePlugin"]
    from airflow.plugins_manager import AirflowPlugin

    assert issubclass(found[0].load(), AirflowPlugin)


def test_app_views_and_links_work_behind_a_url_prefix():
    from fastapi import FastAPI

    from airflow_metric_gate.plugins.metric_gate import URL_PREFIX, MetricGatePlugin

    (app,) = MetricGatePlugin.fastapi_apps
    assert isinstance(app["app"], FastAPI) and app["url_prefix"] == URL_PREFIX
    assert not URL_PREFIX.startswith(("/api/v2", "/ui", "/execution", "/auth", "/pluginsv2"))  # reserved
    routes = {route.path for route in app["app"].routes}
    assert {"/", "/series", "/task", "/mark"} <= routes
    views = {view["destination"]: view for view in MetricGatePlugin.external_views}
    assert set(views) == {"nav", "task_instance"}
    for view in views.values():
        assert view["href"].startswith(URL_PREFIX.lstrip("/") + "/")  # relative: resolved against the UI's base
    task = views["task_instance"]["href"]
    assert all(f"{{{name}}}" in task for name in ("DAG_ID", "RUN_ID", "TASK_ID", "MAP_INDEX"))
