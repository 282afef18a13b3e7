"""Fixtures shared by the unit tests of the operators."""

from __future__ import annotations

import pytest


@pytest.fixture
def db(tmp_path, monkeypatch):
    """The path of an empty SQLite store that the ``metric_gate_db`` connection points at."""
    path = tmp_path / "metric_gate.db"
    monkeypatch.setenv("AIRFLOW_CONN_METRIC_GATE_DB", f"sqlite:///{path}")
    return path
