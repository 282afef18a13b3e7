"""Fixtures shared by the unit tests of the operators."""

from __future__ import annotations

import pytest
from _stores import StoreDatabase


@pytest.fixture
def db(store_url, monkeypatch):
    """An empty store that the ``metric_gate_db`` connection points at, once per backend (SQLite, Postgres)."""
    monkeypatch.setenv("AIRFLOW_CONN_METRIC_GATE_DB", store_url)
    return StoreDatabase(store_url)
