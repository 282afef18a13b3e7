"""MetricStoreHook on the real PostgreSQL: the Test button and the store, for each connection type."""

from __future__ import annotations

import json
from urllib.parse import urlsplit

import pytest

from airflow_metric_gate.hooks.metric_store import MetricStoreHook
from airflow_metric_gate.store.schema import SCHEMA_VERSION

pytestmark = pytest.mark.postgres


def _metric_gate_connection(pg_url: str, **extra) -> str:
    parts = urlsplit(pg_url)
    return json.dumps({
        "conn_type": "metric_gate", "host": parts.hostname, "port": parts.port, "login": parts.username,
        "password": parts.password or "", "schema": parts.path.lstrip("/"),
        "extra": {"connect_timeout": 5, "statement_timeout": "30s", **extra},
    })


@pytest.fixture(params=["metric_gate", "postgres"])
def connection(request, pg_url, monkeypatch):
    """The store's connection, as this package's type and as an ordinary postgres connection."""
    value = _metric_gate_connection(pg_url) if request.param == "metric_gate" else pg_url
    monkeypatch.setenv("AIRFLOW_CONN_METRIC_GATE_DB", value)
    return request.param


def test_test_button_then_store_round_trip(connection):
    hook = MetricStoreHook()
    ok, message = hook.test_connection()
    assert ok, message
    assert f"{connection} connection 'metric_gate_db'" in message
    assert "schema not created yet" in message

    with hook.get_store() as store:
        assert store.upgrade()[1] == SCHEMA_VERSION
        assert store.list_runs() == []
    ok, message = hook.test_connection()
    assert ok and message.endswith(f"schema version {SCHEMA_VERSION}")


def test_statement_timeout_extra_is_applied(pg_url, monkeypatch):
    monkeypatch.setenv("AIRFLOW_CONN_METRIC_GATE_DB", _metric_gate_connection(pg_url, statement_timeout="1234ms"))
    with MetricStoreHook().get_store() as store, store._transaction(schema=False) as cur:
        cur.execute("SHOW statement_timeout")
        assert cur.fetchone()[0] == "1234ms"


def test_wrong_database_fails_the_test_button_with_the_reason(pg_url, monkeypatch):
    other = pg_url.rsplit("/", 1)[0] + "/no_such_db_x"
    monkeypatch.setenv("AIRFLOW_CONN_METRIC_GATE_DB", _metric_gate_connection(other))
    ok, message = MetricStoreHook().test_connection()
    assert not ok
    assert "no_such_db_x" in message and "does not exist" in message
