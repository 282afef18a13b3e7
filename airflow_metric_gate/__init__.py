"""airflow-metric-gate: guard nightly ML training runs against silent metric regressions."""

from __future__ import annotations

__version__ = "0.1.0"

__all__ = ["__version__", "get_provider_info"]


def get_provider_info() -> dict:
    """Return the provider metadata Airflow reads through the ``apache_airflow_provider`` entry point.

    Airflow validates it against its ``provider_info.schema.json`` when it discovers providers; an
    invalid dictionary breaks provider discovery for the whole installation, so a test checks it.
    The store's connection is an ordinary ``postgres`` connection (the type belongs to the postgres
    provider and is not registered again here); its default id is the ``[metric_gate] conn_id``
    option declared below.
    """
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
        "connection-types": [],
        "config": {
            "metric_gate": {
                "description": "Defaults of the metric gate operators.",
                "options": {
                    "conn_id": {
                        "description": "Id of the Airflow connection (type ``postgres``) of the metric "
                        "store, used when an operator is given no ``conn_id``.",
                        "version_added": "0.1.0",
                        "type": "string",
                        "example": "metric_gate_db",
                        "default": "metric_gate_db",
                    },
                },
            },
        },
    }
