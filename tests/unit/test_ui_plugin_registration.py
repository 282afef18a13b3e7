"""The package registers its UI plugin the way Airflow 3.1+ discovers and mounts it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from importlib.metadata import entry_points

import pytest

from airflow_metric_gate import get_provider_info

_LOADED = """
import json
from airflow import plugins_manager
plugins, errors = plugins_manager._get_plugins()
print(json.dumps({"names": [p.name for p in plugins], "errors": {k: str(v) for k, v in errors.items()}}))
"""


def test_the_plugin_is_an_airflow_plugins_entry_point():
    found = [ep for ep in entry_points(group="airflow.plugins") if ep.name == "metric_gate"]
    assert [ep.value for ep in found] == ["airflow_metric_gate.plugins.metric_gate:MetricGatePlugin"]
    from airflow.plugins_manager import AirflowPlugin

    assert issubclass(found[0].load(), AirflowPlugin)


@pytest.mark.slow
def test_the_provider_info_names_the_plugin_and_airflow_loads_it_once(tmp_path):
    # As Airflow's own providers do: the entry point loads it, the provider info lists it.
    (plugin,) = get_provider_info()["plugins"]
    assert plugin == {"name": "metric_gate", "plugin-class": "airflow_metric_gate.plugins.metric_gate.MetricGatePlugin"}
    env = {k: v for k, v in os.environ.items() if not k.startswith("AIRFLOW")}
    env.update(AIRFLOW_HOME=str(tmp_path), AIRFLOW__CORE__PLUGINS_FOLDER=str(tmp_path / "plugins"))
    # cwd away from the checkout, whose egg-info would be a second copy of the distribution
    proc = subprocess.run([sys.executable, "-c", _LOADED], env=env, cwd=tmp_path, capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    loaded = json.loads(proc.stdout.strip().splitlines()[-1])
    assert loaded["names"].count("metric_gate") == 1
    assert loaded["errors"] == {}


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
