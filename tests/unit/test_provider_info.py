"""Provider registration: what Airflow reads through the ``apache_airflow_provider`` entry point."""

from __future__ import annotations

import importlib
import json
from importlib.metadata import entry_points
from pathlib import Path

import airflow
import jsonschema
import pytest

from airflow_metric_gate import __version__, get_provider_info


def test_provider_info_passes_airflows_runtime_schema():
    # Airflow validates this at provider discovery; a failure there breaks every provider lookup.
    schema = json.loads((Path(airflow.__file__).parent / "provider_info.schema.json").read_text())
    jsonschema.validate(get_provider_info(), schema)


def test_provider_info_matches_the_distribution():
    info = get_provider_info()
    assert info["package-name"] == "airflow-metric-gate"
    assert info["versions"] == [__version__]


def test_entry_point_is_registered():
    (ep,) = [ep for ep in entry_points(group="apache_airflow_provider") if ep.value.startswith("airflow_metric_gate")]
    assert ep.load() is get_provider_info


def test_store_connection_default_is_declared_as_provider_config():
    option = get_provider_info()["config"]["metric_gate"]["options"]["conn_id"]
    assert option["default"] == "metric_gate_db"


@pytest.mark.parametrize("kind", ["operators", "sensors", "triggers"])
def test_listed_modules_import(kind):
    for entry in get_provider_info()[kind]:
        for module in entry["python-modules"]:
            importlib.import_module(module)
