"""The operators' store connection: timeouts from the connection's extras, passwords never shown."""

from __future__ import annotations

import json
import logging
import socket
import threading
import time

import pytest
from _fakes import context
from airflow.sdk.exceptions import AirflowException, AirflowFailException
from fake_postgres import FakePostgres

from airflow_metric_gate.declarations import declare
from airflow_metric_gate.operators.evaluate import EvaluateGateOperator
from airflow_metric_gate.operators.persist import PersistValuesOperator
from airflow_metric_gate.pipeline import selection_to_payload
from airflow_metric_gate.selection import Selection

# These tests give PersistValuesOperator its values inline (the deprecated version 1 selection).
pytestmark = pytest.mark.filterwarnings("ignore:a selection with its values inline:DeprecationWarning")

PASSWORD = "Hunter2Secret"
AT_PASSWORD = "Sup3rFirst@S3cretTail"
SECRET_PARTS = (PASSWORD, "Sup3rFirst", "S3cretTail")


def _payload() -> dict:
    declaration = declare("train/loss", steps="all", constraint={"rel_up": 0.5, "rel_down": 0.5})
    return selection_to_payload([Selection(declaration, points=[(0, 1.0, 0), (1, 1.1, 1)])])


def _persist(**kwargs) -> PersistValuesOperator:
    return PersistValuesOperator(task_id="persist_values", selection=_payload(), series="rl", **kwargs)


def _connection(monkeypatch, *, port, password=PASSWORD, extra=None, uri=False):
    if uri:
        value = f"postgresql://postgres:{password}@127.0.0.1:{port}/x"
    else:
        value = json.dumps({"conn_type": "postgres", "host": "127.0.0.1", "port": port, "login": "postgres",
                            "password": password, "schema": "x", "extra": extra or {}})
    monkeypatch.setenv("AIRFLOW_CONN_METRIC_GATE_DB", value)


def _execute(operator, limit):
    """Run ``execute`` in a thread; fail (rather than hang the suite) if it takes over ``limit`` s."""
    outcome: dict = {}

    def target():
        try:
            outcome["result"] = operator.execute(context())
        except BaseException as exc:  # noqa: BLE001 - handed to the test
            outcome["error"] = exc

    started = time.monotonic()
    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    thread.join(limit)
    assert not thread.is_alive(), f"the task still runs after {limit} s"
    outcome["took"] = time.monotonic() - started
    return outcome


def _assert_no_secret(text):
    for part in SECRET_PARTS:
        assert part not in text, text


@pytest.mark.parametrize(
    ("password", "uri"),
    [(PASSWORD, False), (AT_PASSWORD, False), (PASSWORD, True), (AT_PASSWORD.replace("@", "%40"), True),
     (AT_PASSWORD, True)],
)
def test_wrong_password_fails_without_retry_and_without_showing_the_password(monkeypatch, caplog, password, uri):
    caplog.set_level(logging.DEBUG)
    with FakePostgres("password") as server:
        _connection(monkeypatch, port=server.port, password=password, uri=uri)
        outcome = _execute(_persist(), 30)
    err = outcome["error"]
    assert isinstance(err, AirflowFailException), err  # a configuration error: no retry cures it
    assert "password authentication failed" in str(err) and "retrying will not help" in str(err)
    _assert_no_secret(str(err))
    _assert_no_secret(caplog.text)


def test_unreachable_store_retries_without_showing_the_password(monkeypatch, caplog):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    _connection(monkeypatch, port=port, password=AT_PASSWORD)
    outcome = _execute(EvaluateGateOperator(task_id="evaluate_gate", run={"run_id": "r1"}), 30)
    err = outcome["error"]
    assert isinstance(err, AirflowException) and not isinstance(err, AirflowFailException), err
    _assert_no_secret(str(err))
    _assert_no_secret(caplog.text)


@pytest.mark.slow
def test_store_that_never_answers_retries_within_the_connect_timeout_extra(monkeypatch):
    with FakePostgres("silent") as server:
        _connection(monkeypatch, port=server.port, extra={"connect_timeout": 2})
        outcome = _execute(_persist(), 20)
    err = outcome["error"]
    assert isinstance(err, AirflowException) and not isinstance(err, AirflowFailException), err
    assert "connect_timeout" in str(err)
    assert outcome["took"] < 10


@pytest.mark.slow
def test_store_that_never_answers_retries_within_the_default_connect_timeout(monkeypatch):
    with FakePostgres("silent") as server:
        _connection(monkeypatch, port=server.port)
        outcome = _execute(_persist(), 30)
    err = outcome["error"]
    assert isinstance(err, AirflowException) and not isinstance(err, AirflowFailException), err
    assert "connect_timeout=10" in str(err)


@pytest.mark.parametrize(
    ("extra", "named"),
    [({"connect_timeout": "soon"}, "connect_timeout"), ({"statement_timeout": "-5s"}, "statement_timeout")],
)
def test_bad_timeout_extra_fails_without_retry(monkeypatch, extra, named):
    _connection(monkeypatch, port=5432, extra=extra)
    outcome = _execute(_persist(), 20)
    err = outcome["error"]
    assert isinstance(err, AirflowFailException), err
    assert named in str(err)
    _assert_no_secret(str(err))


def test_unreadable_connection_error_never_shows_a_password(monkeypatch):
    from airflow.sdk import BaseHook

    def broken(cls, conn_id):
        raise ValueError(f"cannot parse postgresql://postgres:{PASSWORD}@db/x for {conn_id}")

    monkeypatch.setattr(BaseHook, "get_connection", classmethod(broken))
    with pytest.raises(AirflowException) as err:
        _persist().execute(context())
    assert not isinstance(err.value, AirflowFailException)
    assert "postgresql://postgres:***@db/x" in str(err.value)
    cause = err.value
    while cause is not None:  # no error in the chain shows the password
        _assert_no_secret(str(cause))
        cause = cause.__cause__
