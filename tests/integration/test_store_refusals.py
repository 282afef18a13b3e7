"""A store that refuses its settings or grants is bad input; only a server out of reach is retried.

Through ``metric-gate run`` (exit 2, nothing stored, never "retry later") and through the
operators (``AirflowFailException``: the shipped DAG's retries are not spent on it), against the
real PostgreSQL server: a database or role that does not exist, a role refused the database, a
role refused the tables; a wrong password through a loopback server that asks for one; and an
Airflow connection that is not defined.
"""

from __future__ import annotations

import json
import socket
import uuid
from urllib.parse import urlsplit, urlunsplit

import psycopg2
import pytest
from _fakes import context
from _test_env import database_name
from airflow.sdk.exceptions import AirflowException, AirflowFailException
from fake_postgres import FakePostgres

from airflow_metric_gate.cli import main
from airflow_metric_gate.declarations import declare
from airflow_metric_gate.operators.persist import PersistValuesOperator
from airflow_metric_gate.pipeline import selection_to_payload
from airflow_metric_gate.selection import Selection
from airflow_metric_gate.store import open_store

# These tests give PersistValuesOperator its values inline (the deprecated version 1 selection).
pytestmark = pytest.mark.filterwarnings("ignore:a selection with its values inline:DeprecationWarning")

PASSWORD = "Refused2Secret"
GATES_YAML = "gates:\n  - metric_key: train/loss\n    steps: all\n    constraint: {rel_up: 0.5, rel_down: 0.5}\n"


def _with(url: str, *, user: str | None = None, password: str | None = None, db: str | None = None) -> str:
    parts = urlsplit(url)
    host = parts.netloc.rpartition("@")[2]
    name = user or parts.username or "postgres"
    userinfo = f"{name}:{password}@" if password else f"{name}@"
    path = f"/{db}" if db else parts.path
    return urlunsplit((parts.scheme, userinfo + host, path, parts.query, ""))


@pytest.fixture
def admin(pg_url):
    conn = psycopg2.connect(pg_url)
    conn.autocommit = True
    yield conn
    conn.close()


@pytest.fixture
def role(admin):
    """A login role of its own (dropped afterwards)."""
    name = f"mg_refused_{uuid.uuid4().hex[:8]}"
    with admin.cursor() as cur:
        cur.execute(f'CREATE ROLE "{name}" LOGIN')
    yield name
    with admin.cursor() as cur:
        cur.execute(f'DROP OWNED BY "{name}"')
        cur.execute(f'DROP ROLE IF EXISTS "{name}"')


@pytest.fixture
def closed_db(admin, role):
    """A database that ``role`` may not connect to."""
    name = database_name("closed")
    with admin.cursor() as cur:
        cur.execute(f'CREATE DATABASE "{name}"')
        cur.execute(f'REVOKE CONNECT ON DATABASE "{name}" FROM PUBLIC')
    yield name
    with admin.cursor() as cur:
        cur.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def _night(tmp_path):
    record = tmp_path / "night.jsonl"
    record.write_text(json.dumps({"metric": "train/loss", "series": [[0, 1.0], [1, 1.1]]}) + "\n")
    gates = tmp_path / "gates.yaml"
    gates.write_text(GATES_YAML)
    return record, gates


def _run(capsys, tmp_path, url):
    record, gates = _night(tmp_path)
    code = main(["run", str(record), "--gates", str(gates), "--store", url, "--series", "rl", "--run-id", "n1"])
    out, err = capsys.readouterr()
    return code, out + err


def _persist(monkeypatch, conn: str | None):
    if conn is None:
        monkeypatch.delenv("AIRFLOW_CONN_METRIC_GATE_DB", raising=False)
    else:
        monkeypatch.setenv("AIRFLOW_CONN_METRIC_GATE_DB", conn)
    declaration = declare("train/loss", steps="all", constraint={"rel_up": 0.5, "rel_down": 0.5})
    payload = selection_to_payload([Selection(declaration, points=[(0, 1.0, 0), (1, 1.1, 1)])])
    operator = PersistValuesOperator(task_id="persist_values", selection=payload, series="rl")
    with pytest.raises(AirflowException) as info:
        operator.execute(context(task_id="t"))
    return info.value


def _assert_refused(code, text, says):
    assert code == 2, text
    assert says in text, text
    assert "retrying will not help" in text and "nothing was stored" in text
    assert "retry later" not in text and PASSWORD not in text


def _cases(pg_url, role, closed_db):
    return {
        "database": (_with(pg_url, password=PASSWORD, db=f"mg_nosuch_{uuid.uuid4().hex[:6]}"), "does not exist"),
        "role": (_with(pg_url, user=f"mg_nosuch_{uuid.uuid4().hex[:6]}", password=PASSWORD), "does not exist"),
        "connect-permission": (_with(pg_url, user=role, password=PASSWORD, db=closed_db), "permission denied"),
    }


@pytest.mark.postgres
@pytest.mark.parametrize("case", ["database", "role", "connect-permission"])
def test_a_store_refusing_its_settings_is_bad_input_for_the_cli(capsys, tmp_path, pg_url, role, closed_db, case):
    url, says = _cases(pg_url, role, closed_db)[case]
    code, text = _run(capsys, tmp_path, url)
    _assert_refused(code, text, says)


@pytest.mark.postgres
@pytest.mark.parametrize("case", ["database", "role", "connect-permission"])
def test_a_store_refusing_its_settings_fails_the_task_without_retry(monkeypatch, pg_url, role, closed_db, case):
    url, says = _cases(pg_url, role, closed_db)[case]
    err = _persist(monkeypatch, url)
    assert isinstance(err, AirflowFailException), err
    assert says in str(err) and "retrying will not help" in str(err) and PASSWORD not in str(err)


@pytest.mark.postgres
def test_a_role_refused_the_tables_is_bad_input_and_nothing_is_stored(capsys, tmp_path, monkeypatch, pg_url, role):
    with open_store(pg_url) as store:
        store.upgrade()  # the tables exist; the role has no grant on them
    url = _with(pg_url, user=role, password=PASSWORD)
    code, text = _run(capsys, tmp_path, url)
    _assert_refused(code, text, "permission denied")
    err = _persist(monkeypatch, url)
    assert isinstance(err, AirflowFailException) and "permission denied" in str(err), err
    with open_store(pg_url) as store:
        assert store.count("runs") == 0 and store.count("metric_values") == 0


def test_a_wrong_password_is_bad_input(capsys, tmp_path, monkeypatch):
    with FakePostgres("password") as server:
        url = f"postgresql://postgres:{PASSWORD}@127.0.0.1:{server.port}/x"
        code, text = _run(capsys, tmp_path, url)
        _assert_refused(code, text, "password authentication failed")
        err = _persist(monkeypatch, url)
    assert isinstance(err, AirflowFailException) and PASSWORD not in str(err), err


def test_an_airflow_connection_that_is_not_defined_fails_the_task_without_retry(monkeypatch):
    err = _persist(monkeypatch, None)
    assert isinstance(err, AirflowFailException), err
    assert "'metric_gate_db'" in str(err) and "is not defined" in str(err)


def test_only_a_server_out_of_reach_is_retried(capsys, tmp_path, monkeypatch):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    url = f"postgresql://postgres:{PASSWORD}@127.0.0.1:{port}/x"
    code, text = _run(capsys, tmp_path, url)
    assert code == 3 and "retry later" in text and PASSWORD not in text, text
    err = _persist(monkeypatch, url)
    assert not isinstance(err, AirflowFailException), err
