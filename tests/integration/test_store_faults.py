"""Fault tests on the real Postgres: a write killed half-way, a statement that waits too long.

Each ends with the right exit code (or a retryable task error), leaves no half-written run (the
store holds the previous complete version or nothing), and a re-run recovers.
"""

from __future__ import annotations

import io
import json
import subprocess
import sys
import threading
import time
from contextlib import contextmanager
from datetime import datetime, timezone
from urllib.parse import urlsplit

import psycopg2
import pytest
from _fakes import night_context
from airflow.sdk.exceptions import AirflowException, AirflowFailException

from airflow_metric_gate.cli import main
from airflow_metric_gate.declarations import declare
from airflow_metric_gate.operators.persist import PersistValuesOperator
from airflow_metric_gate.pipeline import selection_to_payload
from airflow_metric_gate.selection import Selection
from airflow_metric_gate.store import postgres as pg_store

# Some tests give PersistValuesOperator its values inline (the deprecated version 1 selection).
pytestmark = [
    pytest.mark.postgres,
    pytest.mark.slow,  # processes killed mid-write and servers that stall: 22 s in all
    pytest.mark.filterwarnings("ignore:a selection with its values inline:DeprecationWarning"),
]

METRICS = ("train/loss", "train/grad_norm", "rollout/raw_reward")
STEPS = 600
GATES_YAML = "gates:\n" + "".join(
    f"  - metric_key: {m}\n    steps: all\n    constraint: {{rel_up: 0.5, rel_down: 0.5}}\n" for m in METRICS
)


def _night(tmp_path, name, value):
    record = tmp_path / f"{name}.jsonl"
    record.write_text("".join(json.dumps({"metric": m, "series": [[s, value] for s in range(STEPS)]}) + "\n"
                              for m in METRICS))
    gates = tmp_path / "gates.yaml"
    gates.write_text(GATES_YAML)
    return record, gates


def _cli(capsys, *argv):
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out + err


def _stored(url, run_id):
    """``(runs rows, metric_values rows, distinct values)`` of a run, read with a plain connection."""
    conn = psycopg2.connect(url)
    try:
        with conn.cursor() as cur:
            cur.execute("SELECT COUNT(*) FROM runs WHERE run_id = %s", (run_id,))
            runs = cur.fetchone()[0]
            cur.execute("SELECT COUNT(*), array_agg(DISTINCT value) FROM metric_values WHERE run_id = %s", (run_id,))
            rows, values = cur.fetchone()
    finally:
        conn.close()
    return runs, rows, sorted(values or [])


def _terminate_copy(url):
    """Wait until a backend shows the ``COPY`` of ``metric_values`` in progress, then kill it."""
    admin = psycopg2.connect(url)
    admin.autocommit = True
    try:
        with admin.cursor() as cur:
            deadline = time.monotonic() + 10
            while True:
                cur.execute(
                    "SELECT pid FROM pg_stat_activity WHERE datname = current_database() "
                    "AND pid <> pg_backend_pid() AND state = 'active' AND query LIKE 'COPY metric_values%%'"
                )
                row = cur.fetchone()
                if row:
                    break
                assert time.monotonic() < deadline, "no COPY in progress to kill"
                time.sleep(0.01)
            cur.execute("SELECT pg_terminate_backend(%s)", row)
            assert cur.fetchone()[0]
    finally:
        admin.close()


class _KillMidCopy(io.BytesIO):
    """The ``COPY`` payload; once the server has the first chunk, its backend is terminated."""

    def __init__(self, data, url):
        super().__init__(data)
        self.url = url
        self.reads = 0

    def read(self, size=-1):
        self.reads += 1
        if self.reads == 2:
            _terminate_copy(self.url)
        return super().read(size)


@contextmanager
def _kill_mid_copy(monkeypatch, url):
    """Make bulk loads lose their connection half-way through the ``COPY``; yields the payloads."""
    payloads = []

    def bulk_insert(self, cur, rows):  # what the store sends, where it sends it, read in small parts
        payload = _KillMidCopy(rows.copy_binary(), url)
        payloads.append(payload)
        cur.copy_expert(self._copy_statement(cur, rows.run_key), payload, size=4096)

    with monkeypatch.context() as patch:
        patch.setattr(pg_store.PostgresStore, "_bulk_insert_values", bulk_insert)
        yield payloads


def _argv(tmp_path, url, name, value):
    record, gates = _night(tmp_path, name, value)
    return ("run", record, "--gates", gates, "--store", url, "--run-id", "night-1", "--series", "rl")


FULL = len(METRICS) * STEPS


def test_write_killed_mid_copy_keeps_the_previous_version_and_a_rerun_recovers(capsys, tmp_path, pg_url, monkeypatch):
    code, text = _cli(capsys, *_argv(tmp_path, pg_url, "v1", 1.0))
    assert code == 0, text
    assert _stored(pg_url, "night-1") == (1, FULL, [1.0])

    with _kill_mid_copy(monkeypatch, pg_url) as payloads:
        code, text = _cli(capsys, *_argv(tmp_path, pg_url, "v2", 1.1))
    assert payloads and payloads[0].reads >= 2  # the kill came while the COPY was under way
    assert code == 3, text
    assert "store unavailable" in text
    assert _stored(pg_url, "night-1") == (1, FULL, [1.0])

    code, text = _cli(capsys, *_argv(tmp_path, pg_url, "v2", 1.1))
    assert code == 0, text
    assert _stored(pg_url, "night-1") == (1, FULL, [1.1])


def test_new_run_killed_mid_copy_stores_nothing_and_a_rerun_recovers(capsys, tmp_path, pg_url, monkeypatch):
    with _kill_mid_copy(monkeypatch, pg_url) as payloads:
        code, text = _cli(capsys, *_argv(tmp_path, pg_url, "v1", 1.0))
    assert payloads and payloads[0].reads >= 2
    assert code == 3, text
    assert _stored(pg_url, "night-1") == (0, 0, [])

    code, text = _cli(capsys, *_argv(tmp_path, pg_url, "v1", 1.0))
    assert code == 0, text
    assert _stored(pg_url, "night-1") == (1, FULL, [1.0])


@pytest.fixture
def locked_runs(pg_url):
    """Hold an exclusive lock on ``runs`` from another connection until the test releases it."""
    conn = psycopg2.connect(pg_url)
    release = threading.Event()

    def lock():
        with conn.cursor() as cur:
            cur.execute("LOCK TABLE runs IN ACCESS EXCLUSIVE MODE")
            locked.set()
            release.wait(60)
        conn.rollback()

    locked = threading.Event()
    thread = threading.Thread(target=lock, daemon=True)
    yield lambda: (thread.start(), locked.wait(10))[1], release
    release.set()
    if thread.ident is not None:
        thread.join(10)
    conn.close()


def _cli_process(url, record, gates, timeout=60):
    started = time.monotonic()
    proc = subprocess.run(
        [sys.executable, "-m", "airflow_metric_gate.cli", "run", str(record), "--gates", str(gates),
         "--store", url, "--run-id", "night-1", "--series", "rl"],
        capture_output=True, text=True, timeout=timeout,
    )
    return proc, time.monotonic() - started


@pytest.mark.slow
def test_statement_timeout_exits_3_names_the_setting_and_writes_nothing(tmp_path, pg_url, locked_runs):
    start_lock, release = locked_runs
    record, gates = _night(tmp_path, "v1", 1.0)
    proc, _ = _cli_process(pg_url, record, gates)
    assert proc.returncode == 0, proc.stderr

    record2, _ = _night(tmp_path, "v2", 1.1)
    assert start_lock()
    proc, took = _cli_process(f"{pg_url}?statement_timeout=1s", record2, gates)
    release.set()
    assert proc.returncode == 3, proc.stderr
    assert took < 30
    assert "statement_timeout=1s" in proc.stderr
    assert "store unavailable" in proc.stderr
    assert _stored(pg_url, "night-1") == (1, len(METRICS) * STEPS, [1.0])

    proc, _ = _cli_process(pg_url, record2, gates)
    assert proc.returncode == 0, proc.stderr
    assert _stored(pg_url, "night-1") == (1, len(METRICS) * STEPS, [1.1])


def _airflow_connection(monkeypatch, url, extra):
    parts = urlsplit(url)
    monkeypatch.setenv("AIRFLOW_CONN_METRIC_GATE_DB", json.dumps({
        "conn_type": "postgres", "host": parts.hostname, "port": parts.port, "login": parts.username,
        "password": "Hunter2Secret", "schema": parts.path.lstrip("/"), "extra": extra,
    }))


def _context():
    return night_context(datetime(2026, 11, 30, tzinfo=timezone.utc), task_id="persist_values",
                         run_id="scheduled__night")


def _persist():
    declaration = declare("train/loss", steps="all", constraint={"rel_up": 0.5, "rel_down": 0.5})
    payload = selection_to_payload([Selection(declaration, points=[(s, 1.0, s) for s in range(50)])])
    return PersistValuesOperator(task_id="persist_values", selection=payload, series="rl")


def test_statement_timeout_extra_makes_a_blocked_task_retry(monkeypatch, tmp_path, pg_url, locked_runs):
    start_lock, release = locked_runs
    _airflow_connection(monkeypatch, pg_url, {"statement_timeout": "1s", "connect_timeout": 5})
    assert _persist().execute(_context())["rows"] == 50

    assert start_lock()
    started = time.monotonic()
    with pytest.raises(AirflowException) as err:
        _persist().execute(_context())
    release.set()
    assert not isinstance(err.value, AirflowFailException)
    assert time.monotonic() - started < 30
    assert "statement_timeout=1s" in str(err.value)
    assert "Hunter2Secret" not in str(err.value)
