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


@pytest.mark.parametrize("kind", ["operators", "sensors", "triggers", "hooks"])
def test_listed_modules_import(kind):
    for entry in get_provider_info()[kind]:
        for module in entry["python-modules"]:
            importlib.import_module(module)


def test_connection_type_names_its_hook_and_form():
    (conn,) = get_provider_info()["connection-types"]
    module, _, name = conn["hook-class-name"].rpartition(".")
    hook = getattr(importlib.import_module(module), name)
    assert conn["connection-type"] == hook.conn_type == "metric_gate"
    assert conn["hook-name"] == hook.hook_name
    assert {"connect_timeout", "statement_timeout", "sqlite_path"} <= set(conn["conn-fields"])
    assert conn["ui-field-behaviour"]["relabeling"] == {"schema": "Database"}


def test_airflow_finds_the_hook_of_the_connection_type():
    from airflow.sdk.providers_manager_runtime import ProvidersManagerTaskRuntime

    hook = ProvidersManagerTaskRuntime().hooks["metric_gate"]
    assert hook is not None
    assert hook.hook_class_name == "airflow_metric_gate.hooks.metric_store.MetricStoreHook"
    assert hook.connection_id_attribute_name == "metric_gate_conn_id"


@pytest.mark.parametrize("kind", ["notifications", "extra-links"])
def test_listed_classes_import(kind):
    names = get_provider_info()[kind]
    assert names
    for name in names:
        module, _, attr = name.rpartition(".")
        assert isinstance(getattr(importlib.import_module(module), attr), type)


def test_notifiers_are_airflow_notifiers_and_the_link_an_operator_link():
    from airflow.sdk import BaseNotifier, BaseOperatorLink

    from airflow_metric_gate.operators.evaluate import EvaluateGateOperator
    from airflow_metric_gate.operators.links import MetricGateTabLink

    for name in get_provider_info()["notifications"]:
        module, _, attr = name.rpartition(".")
        assert issubclass(getattr(importlib.import_module(module), attr), BaseNotifier)
    assert issubclass(MetricGateTabLink, BaseOperatorLink)
    assert [type(link) for link in EvaluateGateOperator.operator_extra_links] == [MetricGateTabLink]
