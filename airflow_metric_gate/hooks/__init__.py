"""The metric store's Airflow hook, and its connection type as provider metadata (Airflow-free here).

The hook itself is :class:`airflow_metric_gate.hooks.metric_store.MetricStoreHook`.
"""

from __future__ import annotations

from typing import Any

from airflow_metric_gate.store.urls import DEFAULT_CONNECT_TIMEOUT, DEFAULT_STATEMENT_TIMEOUT

DEFAULT_CONN_ID = "metric_gate_db"
CONN_TYPE = "metric_gate"
HOOK_NAME = "Metric Gate store"

#: The extras of a ``metric_gate`` connection shown as form fields, in the declarative form of
#: ``get_provider_info()["connection-types"][...]["conn-fields"]``, where Airflow reads them.
CONN_FIELDS: dict[str, dict[str, Any]] = {
    "connect_timeout": {
        "label": "Connect timeout (seconds)",
        "description": f"Seconds to wait for a new connection (default {DEFAULT_CONNECT_TIMEOUT}; 0 waits forever).",
        "schema": {"type": ["integer", "null"], "minimum": 0, "default": DEFAULT_CONNECT_TIMEOUT},
    },
    "statement_timeout": {
        "label": "Statement timeout",
        "description": f"Longest run of one statement, lock waits included (default {DEFAULT_STATEMENT_TIMEOUT}): "
        "a number with ms, s, min or h; 0 turns it off.",
        "schema": {"type": ["string", "null"], "default": DEFAULT_STATEMENT_TIMEOUT},
    },
    "sslmode": {
        "label": "SSL mode",
        "description": "disable, allow, prefer, require, verify-ca or verify-full (the driver's default: prefer).",
        "schema": {"type": ["string", "null"]},
    },
    "sqlite_path": {
        "label": "SQLite file (embedded store)",
        "description": "For local trials: the store is this SQLite file, created on first use; leave host, "
        "login and password empty.",
        "schema": {"type": ["string", "null"]},
    },
}

#: How the standard fields of a ``metric_gate`` connection are shown (provider-info form).
UI_FIELD_BEHAVIOUR: dict[str, Any] = {
    "hidden-fields": [],
    "relabeling": {"schema": "Database"},
    "placeholders": {"host": "metric-gate-db.internal", "port": "5432", "schema": "metric_gate",
                     "login": "metric_gate"},
}

#: The connection type as ``get_provider_info()["connection-types"]`` lists it.
CONNECTION_TYPE: dict[str, Any] = {
    "hook-class-name": "airflow_metric_gate.hooks.metric_store.MetricStoreHook",
    "hook-name": HOOK_NAME,
    "connection-type": CONN_TYPE,
    "conn-fields": CONN_FIELDS,
    "ui-field-behaviour": UI_FIELD_BEHAVIOUR,
}
