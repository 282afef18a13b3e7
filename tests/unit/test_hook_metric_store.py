"""MetricStoreHook: which store a connection opens, its timeouts, its form, and the Test button."""

from __future__ import annotations

import json
import socket

import pytest

from airflow_metric_gate.hooks import CONN_FIELDS
from airflow_metric_gate.hooks.metric_store import MetricStoreHook, resolve_conn_id
from airflow_metric_gate.store import StoreInputError, StoreUnavailable
from airflow_metric_gate.store.postgres import PostgresStore
from airflow_metric_gate.store.sqlite import SQLiteStore

PASSWORD = "Hunter2S3cret@Tail"


def _set(monkeypatch, conn_id="metric_gate_db", **fields):
    fields.setdefault("conn_type", "metric_gate")
    monkeypatch.setenv(f"AIRFLOW_CONN_{conn_id.upper()}", json.dumps(fields))


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_conn_id_defaults_to_the_config_option(monkeypatch):
    assert resolve_conn_id(None) == resolve_conn_id("  ") == "metric_gate_db"
    assert resolve_conn_id("other") == "other"
    monkeypatch.setenv("AIRFLOW__METRIC_GATE__CONN_ID", "from_config")
    assert resolve_conn_id("") == "from_config"
    assert MetricStoreHook().metric_gate_conn_id == "from_config"


def test_metric_gate_connection_opens_postgres_with_its_timeouts(monkeypatch):
    _set(monkeypatch, host="db.internal", port=6432, schema="gate", login="gate", password=PASSWORD,
         extra={"connect_timeout": 3, "statement_timeout": "5s", "sslmode": "require"})
    store = MetricStoreHook().get_store()
    assert isinstance(store, PostgresStore)
    assert (store.timeouts.connect, store.timeouts.statement_ms) == (3, 5000)
    assert store.description == "metric_gate connection 'metric_gate_db'"
    assert PASSWORD in store.secrets  # hidden from every driver message


def test_form_fields_saved_with_the_prefix_are_read_too(monkeypatch):
    _set(monkeypatch, host="db.internal", extra={"extra__metric_gate__statement_timeout": "2min"})
    assert MetricStoreHook().get_store().timeouts.statement_ms == 120_000


def test_default_timeouts(monkeypatch):
    _set(monkeypatch, host="db.internal", extra={"connect_timeout": "", "statement_timeout": None})
    store = MetricStoreHook().get_store()
    assert (store.timeouts.connect, store.timeouts.statement_ms) == (10, 300_000)


def test_sqlite_path_extra_opens_the_embedded_store(monkeypatch, tmp_path):
    _set(monkeypatch, extra={"sqlite_path": str(tmp_path / "gate.db")})
    store = MetricStoreHook().get_store()
    assert isinstance(store, SQLiteStore) and store.path == str(tmp_path / "gate.db")


@pytest.mark.parametrize(
    ("fields", "named"),
    [
        ({"host": "db", "extra": {"sqlite_path": "/tmp/x.db"}}, "both a SQLite file"),
        ({"host": "db", "password": PASSWORD, "extra": {"statement_timeout": "-5s"}}, "statement_timeout"),
        ({"host": "db", "password": PASSWORD, "extra": {"connect_timeout": "soon"}}, "connect_timeout"),
        ({"host": "db", "password": PASSWORD, "extra": {"sslmode": "always"}}, "sslmode"),
        ({"host": "db", "password": PASSWORD, "extra": {"retries": 3}}, "unknown field(s) retries"),
        ({"login": "gate", "password": PASSWORD}, "names no host"),
        ({"conn_type": "http", "host": "example.com"}, "of type 'http'"),
        ({"conn_type": "sqlite"}, "names no database file"),
    ],
)
def test_bad_connection_is_bad_input_without_the_password(monkeypatch, fields, named):
    _set(monkeypatch, **fields)
    with pytest.raises(StoreInputError, match=named.replace("(", r"\(").replace(")", r"\)")) as err:
        MetricStoreHook().get_store()
    assert PASSWORD not in str(err.value)


def test_postgres_and_sqlite_connections_keep_working(monkeypatch, tmp_path):
    monkeypatch.setenv("AIRFLOW_CONN_METRIC_GATE_DB", f"postgresql://u:{PASSWORD}@db.internal:5432/gate"
                       "?connect_timeout=4&statement_timeout=9s")
    store = MetricStoreHook().get_store()
    assert isinstance(store, PostgresStore)
    assert (store.timeouts.connect, store.timeouts.statement_ms) == (4, 9000)
    assert store.description == "postgres connection 'metric_gate_db'"
    monkeypatch.setenv("AIRFLOW_CONN_METRIC_GATE_DB", f"sqlite:///{tmp_path / 'x.db'}")
    assert isinstance(MetricStoreHook().get_store(), SQLiteStore)


def test_a_connection_that_is_not_defined_is_bad_input(monkeypatch):
    monkeypatch.delenv("AIRFLOW_CONN_NOWHERE", raising=False)
    with pytest.raises(StoreInputError, match="Airflow connection 'nowhere' of the metric store is not defined"):
        MetricStoreHook("nowhere").get_store()


def test_a_secrets_backend_that_fails_is_unavailable(monkeypatch):
    def broken(cls, conn_id):
        raise ConnectionError("vault is down")

    monkeypatch.setattr(MetricStoreHook, "get_connection", classmethod(broken))
    with pytest.raises(StoreUnavailable, match="cannot read Airflow connection 'nowhere'.*vault is down"):
        MetricStoreHook("nowhere").get_store()


def test_test_button_on_a_new_embedded_store(monkeypatch, tmp_path):
    _set(monkeypatch, extra={"sqlite_path": str(tmp_path / "gate.db")})
    ok, message = MetricStoreHook().test_connection()
    assert ok, message
    assert "schema not created yet" in message
    with MetricStoreHook().get_store() as store:
        store.upgrade()
    ok, message = MetricStoreHook().test_connection()
    assert ok and "schema version" in message and "not created" not in message


def test_test_button_on_an_unreachable_store_says_why_without_the_password(monkeypatch):
    _set(monkeypatch, host="127.0.0.1", port=_closed_port(), login="gate", password=PASSWORD,
         extra={"connect_timeout": 2})
    ok, message = MetricStoreHook().test_connection()
    assert not ok
    assert "cannot connect to the metric store" in message
    assert PASSWORD not in message and "S3cret" not in message


@pytest.mark.parametrize("shown", [PASSWORD, "Hunter2S3cret%40Tail"], ids=["as-written", "percent-encoded"])
def test_test_button_hides_the_known_password_from_an_unexpected_error(monkeypatch, shown):
    _set(monkeypatch, host="127.0.0.1", port=5432, login="gate", password=PASSWORD)

    def broken(self):
        raise RuntimeError(f"driver said: bad thing near {shown} (not in a URL)")

    monkeypatch.setattr(MetricStoreHook, "get_store", broken)
    ok, message = MetricStoreHook().test_connection()
    assert not ok and message.startswith("RuntimeError: driver said: bad thing near ***")
    assert "S3cret" not in message


def test_test_button_on_a_bad_connection(monkeypatch):
    _set(monkeypatch, conn_type="http", host="example.com")
    assert MetricStoreHook().test_connection() == (
        False,
        "connection 'metric_gate_db' is of type 'http'; the metric store needs a metric_gate or postgres "
        "connection (or sqlite for local trials)",
    )


def test_the_ui_test_button_reaches_the_hook(monkeypatch, tmp_path):
    # What the API server does for the Test button: a Connection model of the form's values.
    from airflow.models.connection import Connection

    extra = json.dumps({"sqlite_path": str(tmp_path / "ui.db")})
    conn = Connection(conn_id="gate_ui", conn_type="metric_gate", extra=extra)
    monkeypatch.setenv("AIRFLOW_CONN_GATE_UI", conn.as_json())
    ok, message = conn.test_connection()
    assert ok, message
    assert "Connected to the metric store" in message


def test_the_form_comes_from_the_provider_info_alone():
    # Airflow (>= 3.2, so every version the package supports) builds the connection form from the provider
    # info; a hook that still defines the form methods is called too, with a deprecation warning.
    from airflow_metric_gate import get_provider_info

    (connection_type,) = get_provider_info()["connection-types"]
    assert connection_type["conn-fields"] == CONN_FIELDS
    assert connection_type["ui-field-behaviour"]["relabeling"] == {"schema": "Database"}
    assert set(connection_type["ui-field-behaviour"]["placeholders"]) == {"host", "port", "schema", "login"}
    assert "get_connection_form_widgets" not in vars(MetricStoreHook)
    assert "get_ui_field_behaviour" not in vars(MetricStoreHook)


def test_the_ui_opens_the_store_through_the_hook(monkeypatch, tmp_path):
    from airflow_metric_gate.plugins.metadata import open_ui_store

    _set(monkeypatch, extra={"sqlite_path": str(tmp_path / "ui.db")})
    store = open_ui_store()
    assert isinstance(store, SQLiteStore) and store.path == str(tmp_path / "ui.db")
