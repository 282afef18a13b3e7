"""airflow-metric-gate: guard nightly ML training runs against silent metric regressions."""

from __future__ import annotations

__version__ = "0.1.0"

__all__ = ["__version__", "get_provider_info"]


def get_provider_info() -> dict:
    """Return the provider metadata Airflow reads through the ``apache_airflow_provider`` entry point."""
    return {
        "package-name": "airflow-metric-gate",
        "name": "Metric Gate",
        "description": "Gates nightly ML training runs against silent metric regressions.",
        "versions": [__version__],
        "connection-types": [],
    }
