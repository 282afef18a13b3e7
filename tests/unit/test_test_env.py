"""Two test sessions on one machine keep apart: database-name prefix and port range from the environment."""

from __future__ import annotations

import socket

import pytest
from _test_env import database_name, db_prefix, free_port


def test_database_names_start_with_the_prefix_from_the_environment(monkeypatch):
    monkeypatch.delenv("METRIC_GATE_TEST_DB_PREFIX", raising=False)
    assert database_name().startswith("metric_gate_test_")
    monkeypatch.setenv("METRIC_GATE_TEST_DB_PREFIX", "ci_job_42")
    assert db_prefix() == "ci_job_42"
    first, second = database_name("sys_meta"), database_name("sys_meta")
    assert first.startswith("ci_job_42_sys_meta_") and first != second
    monkeypatch.setenv("METRIC_GATE_TEST_DB_PREFIX", 'x"; DROP')
    with pytest.raises(ValueError, match="METRIC_GATE_TEST_DB_PREFIX"):
        database_name()


def test_free_ports_come_from_the_range_from_the_environment(monkeypatch):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        busy = taken.getsockname()[1]
        taken.listen()
        monkeypatch.setenv("METRIC_GATE_TEST_PORTS", f"{busy}-{busy + 3}")
        ports = {free_port() for _ in range(20)}
        assert ports <= set(range(busy + 1, busy + 4)), ports  # never the port in use
        monkeypatch.setenv("METRIC_GATE_TEST_PORTS", f"{busy}-{busy}")
        with pytest.raises(RuntimeError, match="no free port"):
            free_port()
    monkeypatch.setenv("METRIC_GATE_TEST_PORTS", "9-8")
    with pytest.raises(ValueError, match="LOW-HIGH"):
        free_port()
    monkeypatch.delenv("METRIC_GATE_TEST_PORTS")
    assert free_port() > 0


@pytest.mark.postgres
def test_the_session_database_carries_the_prefix(pg_database_url):
    assert pg_database_url.rsplit("/", 1)[1].startswith(db_prefix() + "_")
