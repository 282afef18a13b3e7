"""Shared fixtures: a fresh Postgres database per test session and a store per backend.

Postgres tests use ``METRIC_GATE_TEST_PG_URL`` (default: the local server's ``postgres`` database)
only to create a database of their own, which is dropped at the end of the session.  When the
server cannot be reached those tests are skipped, unless ``METRIC_GATE_REQUIRE_PG=1`` (CI), where
they fail instead.
"""

from __future__ import annotations

import os
import uuid
from urllib.parse import urlsplit, urlunsplit

import pytest

PG_ADMIN_URL = os.environ.get("METRIC_GATE_TEST_PG_URL", "postgresql://postgres@127.0.0.1:5432/postgres")
REQUIRE_PG = os.environ.get("METRIC_GATE_REQUIRE_PG") == "1"


def _admin_connect():
    import psycopg2

    conn = psycopg2.connect(PG_ADMIN_URL, connect_timeout=5)
    conn.autocommit = True
    return conn


@pytest.fixture(scope="session")
def pg_database_url():
    """URL of a fresh Postgres database for this test session (dropped afterwards)."""
    try:
        admin = _admin_connect()
    except Exception as exc:  # the server is down or unreachable
        message = f"Postgres not reachable at {PG_ADMIN_URL}: {exc}"
        if REQUIRE_PG:
            pytest.fail(message)
        pytest.skip(message)
    name = f"metric_gate_test_{uuid.uuid4().hex[:12]}"
    with admin.cursor() as cur:
        cur.execute(f'CREATE DATABASE "{name}"')
    parts = urlsplit(PG_ADMIN_URL)
    url = urlunsplit((parts.scheme, parts.netloc, f"/{name}", parts.query, parts.fragment))
    try:
        yield url
    finally:
        with admin.cursor() as cur:
            cur.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        admin.close()


def _reset_pg(url: str) -> None:
    import psycopg2

    conn = psycopg2.connect(url)
    conn.autocommit = True
    with conn.cursor() as cur:
        cur.execute("DROP TABLE IF EXISTS metric_values, runs, metric_gate_schema CASCADE")
    conn.close()


@pytest.fixture
def pg_url(pg_database_url):
    """A Postgres store URL with no metric-gate tables (they are dropped after each test)."""
    _reset_pg(pg_database_url)
    yield pg_database_url
    _reset_pg(pg_database_url)


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def store_url(request, tmp_path):
    """A fresh, empty store URL, once per backend: the same behavioural test runs on both."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'metric_gate.db'}"
    return request.getfixturevalue("pg_url")


@pytest.fixture
def store(store_url):
    """An open store on a fresh database, once per backend."""
    from airflow_metric_gate.store import open_store

    s = open_store(store_url)
    yield s
    s.close()


_skipped_postgres: list[str] = []


def pytest_runtest_logreport(report):
    if report.skipped and "postgres" in report.keywords:
        _skipped_postgres.append(report.nodeid)


def pytest_sessionfinish(session, exitstatus):
    """Under ``METRIC_GATE_REQUIRE_PG=1`` a skipped Postgres test fails the run."""
    if REQUIRE_PG and _skipped_postgres:
        print(f"\n{len(_skipped_postgres)} Postgres test(s) were skipped but METRIC_GATE_REQUIRE_PG=1:")
        for nodeid in _skipped_postgres[:20]:
            print(f"  {nodeid}")
        session.exitstatus = 1
