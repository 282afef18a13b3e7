"""Store URLs: checked before anything connects, timeouts read, passwords never shown."""

from __future__ import annotations

import pytest

from airflow_metric_gate.store import StoreInputError, open_store, safe_url
from airflow_metric_gate.store.urls import (
    DEFAULT_CONNECT_TIMEOUT,
    DEFAULT_KEEPALIVES,
    DEFAULT_STATEMENT_TIMEOUT_MS,
    Timeouts,
    parse_postgres_url,
    parse_sqlite_url,
    scrub,
)

PASSWORD = "Hunter2Secret"
BASE = f"postgresql://metric_gate:{PASSWORD}@db.internal:6543/gate"


def test_url_becomes_driver_keywords_with_default_timeouts():
    target = parse_postgres_url(BASE)
    assert target.connect_kwargs == {
        "host": "db.internal", "port": 6543, "user": "metric_gate", "password": PASSWORD, "dbname": "gate",
        "connect_timeout": DEFAULT_CONNECT_TIMEOUT, **DEFAULT_KEEPALIVES,
    }
    assert target.timeouts == Timeouts(DEFAULT_CONNECT_TIMEOUT, DEFAULT_STATEMENT_TIMEOUT_MS)
    assert (target.timeouts.lock_ms, target.timeouts.idle_ms) == (60_000, 60_000)
    assert target.timeouts.client_wait_ms == DEFAULT_STATEMENT_TIMEOUT_MS + 30_000
    assert target.shown == "postgresql://metric_gate:***@db.internal:6543/gate"


@pytest.mark.parametrize(
    ("query", "connect", "statement_ms"),
    [
        ("connect_timeout=5&statement_timeout=30s", 5, 30_000),
        ("statement_timeout=1500", DEFAULT_CONNECT_TIMEOUT, 1500),
        ("statement_timeout=250ms", DEFAULT_CONNECT_TIMEOUT, 250),
        ("statement_timeout=2min&connect_timeout=3s", 3, 120_000),
        ("statement_timeout=1h", DEFAULT_CONNECT_TIMEOUT, 3_600_000),
        ("statement_timeout=0&connect_timeout=0", 0, 0),
    ],
)
def test_timeouts_come_from_the_query(query, connect, statement_ms):
    target = parse_postgres_url(f"{BASE}?{query}")
    assert target.timeouts == Timeouts(connect, statement_ms)
    assert target.connect_kwargs["connect_timeout"] == connect
    assert "statement_timeout" not in target.connect_kwargs


@pytest.mark.parametrize(
    ("query", "lock_ms", "idle_ms", "client_ms"),
    [
        ("lock_timeout=5s&idle_in_transaction_session_timeout=2min", 5000, 120_000, 330_000),
        ("client_timeout=45s", 60_000, 60_000, 45_000),
        ("statement_timeout=10s", 60_000, 60_000, 40_000),
        ("statement_timeout=0", 60_000, 60_000, 0),
        ("lock_timeout=0&idle_in_transaction_session_timeout=0&client_timeout=0", 0, 0, 0),
    ],
)
def test_lock_idle_and_client_timeouts_come_from_the_query_and_never_reach_the_driver(query, lock_ms, idle_ms,
                                                                                       client_ms):
    target = parse_postgres_url(f"{BASE}?{query}")
    assert (target.timeouts.lock_ms, target.timeouts.idle_ms, target.timeouts.client_wait_ms) == (
        lock_ms, idle_ms, client_ms)
    assert not {"lock_timeout", "idle_in_transaction_session_timeout", "client_timeout"} & set(target.connect_kwargs)


def test_keepalive_defaults_give_way_to_the_url():
    target = parse_postgres_url(f"{BASE}?keepalives_idle=5&tcp_user_timeout=0")
    assert (target.connect_kwargs["keepalives_idle"], target.connect_kwargs["tcp_user_timeout"]) == ("5", "0")
    assert target.connect_kwargs["keepalives_count"] == DEFAULT_KEEPALIVES["keepalives_count"]


def test_libpq_parameters_pass_through():
    target = parse_postgres_url(
        f"{BASE}?sslmode=verify-full&sslrootcert=/etc/ca.pem&application_name=gate&keepalives_idle=30"
        "&target_session_attrs=read-write&tcp_user_timeout=10000"
    )
    assert target.connect_kwargs["sslmode"] == "verify-full"
    assert target.connect_kwargs["sslrootcert"] == "/etc/ca.pem"
    assert target.connect_kwargs["application_name"] == "gate"
    assert target.connect_kwargs["keepalives_idle"] == "30"


def test_percent_encoded_and_unencoded_at_sign_passwords_give_the_same_host():
    encoded = parse_postgres_url("postgresql://u:pa%40ss@db/x").connect_kwargs
    raw = parse_postgres_url("postgresql://u:pa@ss@db/x").connect_kwargs
    assert encoded == raw
    assert raw["host"] == "db" and raw["password"] == "pa@ss"


def test_unix_socket_folder_as_host_parameter():
    target = parse_postgres_url("postgresql:///gate?host=/var/run/postgresql")
    assert target.connect_kwargs["host"] == "/var/run/postgresql"
    assert target.connect_kwargs["dbname"] == "gate"


@pytest.mark.parametrize(
    ("query", "named"),
    [
        ("bogus=1", "'bogus'"),
        ("password=x", "'password'"),
        ("connect_timeout=soon", "connect_timeout"),
        ("connect_timeout=1.5", "connect_timeout"),
        ("connect_timeout=500ms", "connect_timeout"),
        ("statement_timeout=-3s", "statement_timeout"),
        ("statement_timeout=10parsecs", "statement_timeout"),
        ("statement_timeout=30d", "statement_timeout"),
        ("statement_timeout=", "statement_timeout"),
        ("connect_timeout=5&connect_timeout=6", "given twice"),
        ("sslmode=sometimes", "sslmode"),
        ("target_session_attrs=fast", "target_session_attrs"),
        ("keepalives=yes", "keepalives"),
        ("keepalives_count=-1", "keepalives_count"),
        ("host=other", "host"),
    ],
)
def test_bad_query_is_bad_input_naming_the_parameter(query, named):
    with pytest.raises(StoreInputError, match=named) as err:
        parse_postgres_url(f"{BASE}?{query}")
    assert PASSWORD not in str(err.value)
    assert "db.internal:6543/gate" in str(err.value)


@pytest.mark.parametrize(
    "url",
    [
        f"postgresql://u:{PASSWORD}@db:notaport/x",
        f"postgresql://u:{PASSWORD}@db:70000/x",
        f"postgresql://u:Hunter2/{PASSWORD}@db/x",
        f"postgresql://u:{PASSWORD}@db1,db2/x",
    ],
)
def test_malformed_url_is_bad_input_without_the_password(url):
    with pytest.raises(StoreInputError) as err:
        parse_postgres_url(url)
    assert PASSWORD not in str(err.value) and "Hunter2" not in str(err.value)


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        (BASE, "postgresql://metric_gate:***@db.internal:6543/gate"),
        (f"{BASE}?sslpassword={PASSWORD}", "postgresql://metric_gate:***@db.internal:6543/gate"),
        (f"mysql://root:{PASSWORD}@db/x", "mysql://root:***@db/x"),
        ("postgresql://u:Sup3r@S3cret@db/x", "postgresql://u:***@db/x"),
        ("postgresql://gate@db/x", "postgresql://gate@db/x"),
        (f"host=db user=u password={PASSWORD} dbname=x", "host=db user=u password=*** dbname=x"),
        (f"host=db password='{PASSWORD} x' dbname=x", "host=db password=*** dbname=x"),
        (f"u:{PASSWORD}@db/x", "u:***@db/x"),
        ("sqlite:///metric_gate.db", "sqlite:///metric_gate.db"),
    ],
)
def test_safe_url_hides_the_password(url, shown):
    assert safe_url(url) == shown


def test_scrub_hides_known_secrets_and_keeps_one_line():
    text = 'connection to server at "ss@db" failed:\n\tFATAL: got \'pa@ss\'\n'
    assert scrub(text, ["pa@ss", "pa%40ss"]) == "connection to server at \"ss@db\" failed: FATAL: got '***'"
    assert scrub(f"could not reach postgresql://u:{PASSWORD}@db/x") == "could not reach postgresql://u:***@db/x"


def test_unsupported_scheme_names_the_forms_without_the_password():
    with pytest.raises(StoreInputError, match="unsupported store URL mysql://root:\\*\\*\\*@db/x") as err:
        open_store(f"mysql://root:{PASSWORD}@db/x")
    assert PASSWORD not in str(err.value)
    assert "postgresql://" in str(err.value) and "sqlite:///" in str(err.value)


def test_sqlite_url_takes_a_lock_timeout():
    assert parse_sqlite_url("sqlite:///gate.db?timeout=5") == ("gate.db", 5)
    assert parse_sqlite_url("sqlite:////abs/gate.db") == ("/abs/gate.db", 30.0)
    assert open_store("sqlite:///:memory:?timeout=2").timeout == 2


@pytest.mark.parametrize(("query", "named"), [("bogus=1", "'bogus'"), ("timeout=soon", "timeout")])
def test_sqlite_url_with_a_bad_query_is_bad_input(query, named):
    with pytest.raises(StoreInputError, match=named):
        open_store(f"sqlite:///gate.db?{query}")


def test_every_query_parameter_and_default_is_documented():
    from pathlib import Path

    from airflow_metric_gate.store.urls import DEFAULT_STATEMENT_TIMEOUT, POSTGRES_PARAMETERS, SQLITE_PARAMETERS

    page = (Path(__file__).resolve().parents[2] / "docs" / "configuration.md").read_text(encoding="utf-8")
    for name in [*POSTGRES_PARAMETERS, *SQLITE_PARAMETERS]:
        assert f"`{name}" in page, f"store URL parameter {name!r} is not documented"
    assert f"`{DEFAULT_CONNECT_TIMEOUT}`" in page
    assert f"`{DEFAULT_STATEMENT_TIMEOUT}`" in page
