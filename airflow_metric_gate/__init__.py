"""airflow-metric-gate: guard nightly ML training runs against silent metric regressions."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

# The public API, imported on first use so that ``import airflow_metric_gate`` stays fast and loads
# no Airflow module: name -> module defining it.
_LAZY = {
    "load_declarations": "airflow_metric_gate.api",
    "run_gate": "airflow_metric_gate.api",
    "metric_gate": "airflow_metric_gate.task_groups",
    "Verdict": "airflow_metric_gate.api",
    "GateDeclaration": "airflow_metric_gate.declarations",
    "MetricGateError": "airflow_metric_gate.errors",
    "BadInputError": "airflow_metric_gate.errors",
    "UnavailableError": "airflow_metric_gate.errors",
    "DeclarationError": "airflow_metric_gate.declarations",
    "RecordError": "airflow_metric_gate.records",
    "EarlierRunsPending": "airflow_metric_gate.pipeline",
    "EvaluateOptions": "airflow_metric_gate.pipeline",
    "open_store": "airflow_metric_gate.store",
    "StoreError": "airflow_metric_gate.store",
    "StoreInputError": "airflow_metric_gate.store",
    "StoreUnavailable": "airflow_metric_gate.store",
}

__all__ = [
    "BadInputError",
    "DeclarationError",
    "EarlierRunsPending",
    "EvaluateOptions",
    "GateDeclaration",
    "MetricGateError",
    "RecordError",
    "StoreError",
    "StoreInputError",
    "StoreUnavailable",
    "UnavailableError",
    "Verdict",
    "__version__",
    "get_provider_info",
    "load_declarations",
    "metric_gate",
    "open_store",
    "run_gate",
]

if TYPE_CHECKING:
    from airflow_metric_gate.api import Verdict, load_declarations, run_gate
    from airflow_metric_gate.declarations import DeclarationError, GateDeclaration
    from airflow_metric_gate.errors import BadInputError, MetricGateError, UnavailableError
    from airflow_metric_gate.pipeline import EarlierRunsPending, EvaluateOptions
    from airflow_metric_gate.records import RecordError
    from airflow_metric_gate.store import StoreError, StoreInputError, StoreUnavailable, open_store
    from airflow_metric_gate.task_groups import metric_gate


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # later look-ups skip this function
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_LAZY})


def get_provider_info() -> dict:
    """Return the provider metadata Airflow reads through the ``apache_airflow_provider`` entry point.

    Airflow validates it against its ``provider_info.schema.json`` when it discovers providers; an
    invalid dictionary breaks provider discovery for the whole installation, so a test checks it.
    The store's connection type ``metric_gate`` (form fields and the UI's Test button) belongs to
    :class:`~airflow_metric_gate.hooks.metric_store.MetricStoreHook`; ordinary ``postgres``
    connections keep working.  Its default id is the ``[metric_gate] conn_id`` option declared below.
    ``notifications`` lists the Slack and email notifiers, ``extra-links`` the evaluate task's
    "Metric gate" link, ``plugins`` the UI plugin (also registered by its ``airflow.plugins`` entry point).
    """
    from airflow_metric_gate.hooks import CONNECTION_TYPE  # Airflow-free: the form's description

    integration = "Metric Gate"
    return {
        "package-name": "airflow-metric-gate",
        "name": "Metric Gate",
        "description": "Gates nightly ML training runs against silent metric regressions.",
        "versions": [__version__],
        "integrations": [
            {"integration-name": integration, "tags": ["software"]},
        ],
        "operators": [
            {
                "integration-name": integration,
                "python-modules": [
                    "airflow_metric_gate.operators.ingest",
                    "airflow_metric_gate.operators.select",
                    "airflow_metric_gate.operators.persist",
                    "airflow_metric_gate.operators.evaluate",
                ],
            }
        ],
        "sensors": [
            {
                "integration-name": integration,
                "python-modules": ["airflow_metric_gate.sensors.training_output"],
            }
        ],
        "triggers": [
            {
                "integration-name": integration,
                "python-modules": ["airflow_metric_gate.triggers.training_output"],
            }
        ],
        "hooks": [
            {
                "integration-name": integration,
                "python-modules": ["airflow_metric_gate.hooks.metric_store"],
            }
        ],
        "connection-types": [CONNECTION_TYPE],
        "notifications": [
            "airflow_metric_gate.notifications.slack.MetricGateSlackNotifier",
            "airflow_metric_gate.notifications.smtp.MetricGateEmailNotifier",
        ],
        "extra-links": ["airflow_metric_gate.operators.links.MetricGateTabLink"],
        "plugins": [
            {"name": "metric_gate", "plugin-class": "airflow_metric_gate.plugins.metric_gate.MetricGatePlugin"},
        ],
        "config": {
            "metric_gate": {
                "description": "Defaults of the metric gate operators.",
                "options": {
                    "conn_id": {
                        "description": "Id of the Airflow connection (type ``metric_gate`` or ``postgres``) "
                        "of the metric store, used when an operator is given no ``conn_id``.",
                        "version_added": "0.1.0",
                        "type": "string",
                        "example": "metric_gate_db",
                        "default": "metric_gate_db",
                    },
                },
            },
        },
    }
