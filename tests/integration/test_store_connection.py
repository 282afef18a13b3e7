"""The CLI's store connection: URL validation, timeouts and passwords that never show (issue 8)."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time

import pytest
from fake_postgres import FakePostgres

from airflow_metric_gate.cli import main

PASSWORD = "Hunter2Secret"
#: A password with an unencoded ``@``: libpq would take ``S3cretTail@host`` for the host name.
AT_PASSWORD = "Sup3rFirst@S3cretTail"
SECRET_PARTS = (PASSWORD, "Sup3rFirst", "S3cretTail")

GATES_YAML = "gates:\n  - metric_key: train/loss\n    steps: all\n    constraint: {rel_up: 0.5, rel_down: 0.5}\n"


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _cli(capsys, monkeypatch, how, url, *argv):
    """Run ``metric-gate`` with the store URL in ``--store`` or in ``METRIC_GATE_STORE``."""
    if how == "flag":
        monkeypatch.delenv("METRIC_GATE_STORE", raising=False)
        argv = (*argv, "--store", url)
    else:
        monkeypatch.setenv("METRIC_GATE_STORE", url)
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out + err


def _assert_no_secret(text):
    for part in SECRET_PARTS:
        assert part not in text, text


@pytest.fixture
def password_server():
    with FakePostgres("password") as server:
        yield server


@pytest.fixture
def silent_server():
    with FakePostgres("silent") as server:
        yield server


@pytest.fixture
def record(tmp_path):
    path = tmp_path / "record.jsonl"
    path.write_text(json.dumps({"metric": "train/loss", "series": [[s, 1.0] for s in range(3)]}) + "\n")
    gates = tmp_path / "gates.yaml"
    gates.write_text(GATES_YAML)
    return path, gates


@pytest.mark.parametrize("how", ["flag", "env"])
@pytest.mark.parametrize(
    ("url", "code", "says"),
    [
        (f"mysql://postgres:{PASSWORD}@127.0.0.1:3306/db", 2, "unsupported store URL"),
        (f"postgresql://postgres:{PASSWORD}@127.0.0.1:5432/postgres?bogus=1", 2, "'bogus'"),
        (f"postgresql://postgres:{PASSWORD}@127.0.0.1:5432/postgres?connect_timeout=soon", 2, "connect_timeout"),
        (f"postgresql://postgres:{PASSWORD}@127.0.0.1:5432/postgres?statement_timeout=-3s", 2, "statement_timeout"),
        (f"postgresql://postgres:{PASSWORD}@127.0.0.1:notaport/postgres", 2, "port"),
        (f"host=127.0.0.1 user=postgres password={PASSWORD}", 2, "unsupported store URL"),
    ],
)
def test_bad_store_url_is_bad_input_without_the_password(capsys, monkeypatch, how, url, code, says):
    got, text = _cli(capsys, monkeypatch, how, url, "runs")
    assert got == code, text
    assert says in text
    assert "Traceback" not in text
    _assert_no_secret(text)


@pytest.mark.parametrize("how", ["flag", "env"])
def test_unreachable_host_is_retryable_without_the_password(capsys, monkeypatch, how):
    url = f"postgresql://postgres:{PASSWORD}@127.0.0.1:{_closed_port()}/x"
    code, text = _cli(capsys, monkeypatch, how, url, "runs")
    assert code == 3, text
    assert "store unavailable" in text
    _assert_no_secret(text)


@pytest.mark.parametrize("how", ["flag", "env"])
@pytest.mark.parametrize("password", [PASSWORD, AT_PASSWORD])
def test_wrong_password_is_bad_input_and_never_shows_the_password(capsys, monkeypatch, password_server, how, password):
    # The server echoes the password it got in its error: the message must still not carry it.
    url = f"postgresql://postgres:{password}@127.0.0.1:{password_server.port}/x"
    code, text = _cli(capsys, monkeypatch, how, url, "runs")
    assert code == 2, text  # a retry sends the same password: exit 2, not "retry later"
    assert "password authentication failed" in text
    assert "127.0.0.1" in text
    _assert_no_secret(text)


@pytest.mark.parametrize("how", ["flag", "env"])
def test_at_sign_in_password_does_not_leak_through_the_host_name(capsys, monkeypatch, how):
    url = f"postgresql://postgres:{AT_PASSWORD}@127.0.0.1:{_closed_port()}/x"
    code, text = _cli(capsys, monkeypatch, how, url, "runs")
    assert code == 3, text
    _assert_no_secret(text)


@pytest.mark.postgres
def test_at_sign_in_password_reaches_the_right_host(capsys, monkeypatch, pg_url):
    # The local server trusts every connection: the password is sent and ignored.
    url = pg_url.replace("postgresql://postgres@", f"postgresql://postgres:{AT_PASSWORD}@", 1)
    assert url != pg_url
    code, text = _cli(capsys, monkeypatch, "flag", url, "runs")
    assert code == 0, text
    assert "no stored runs" in text


def _run_cli_process(record, url, timeout=40):
    path, gates = record
    started = time.monotonic()
    proc = subprocess.run(
        [sys.executable, "-m", "airflow_metric_gate.cli", "run", str(path), "--gates", str(gates),
         "--store", url, "--run-id", "r1"],
        capture_output=True, text=True, timeout=timeout,
    )
    return proc, time.monotonic() - started


@pytest.mark.slow
@pytest.mark.parametrize(("query", "limit"), [("?connect_timeout=2", 2), ("", 10)])
def test_store_that_never_answers_exits_3_within_the_connect_timeout(record, silent_server, query, limit):
    proc, took = _run_cli_process(record, f"postgresql://postgres@127.0.0.1:{silent_server.port}/x{query}")
    assert proc.returncode == 3, proc.stderr
    assert took < limit + 8, took
    assert "connect_timeout" in proc.stderr
    assert "store unavailable" in proc.stderr


@pytest.mark.postgres
@pytest.mark.parametrize(("query", "shown"), [("", "5min"), ("?statement_timeout=1234ms", "1234ms"),
                                              ("?statement_timeout=0", "0")])
def test_every_transaction_runs_under_the_statement_timeout(pg_url, query, shown):
    from airflow_metric_gate.store import open_store

    with open_store(f"{pg_url}{query}") as store:
        with store._transaction() as cur:
            cur.execute("SHOW statement_timeout")
            assert cur.fetchone()[0] == shown
