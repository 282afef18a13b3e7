"""The embedded SQLite store: the default for local runs, trials and quick starts."""

from __future__ import annotations

import os
import sqlite3
from datetime import datetime
from typing import Any

from airflow_metric_gate.dates import utc
from airflow_metric_gate.store.base import MetricStore
from airflow_metric_gate.store.urls import DEFAULT_SQLITE_TIMEOUT, parse_sqlite_url


class SQLiteStore(MetricStore):
    """The metric store in one SQLite file (same schema and answers as Postgres).

    :param path: the database file; created with its folder on first use. ``":memory:"`` works too.
    :param timeout: seconds to wait for a lock held by another writer.
    """

    dialect = "sqlite"
    outage_errors = (sqlite3.OperationalError,)
    driver_errors = (sqlite3.Error,)

    def __init__(self, path: str | os.PathLike, *, timeout: float = DEFAULT_SQLITE_TIMEOUT) -> None:
        self.path = os.fspath(path)
        self.timeout = timeout
        super().__init__(self._open, description=f"sqlite {self.path}")

    @classmethod
    def from_url(cls, url: str) -> SQLiteStore:
        """Open a store from a ``sqlite:///PATH[?timeout=SECONDS]`` URL.

        :param url: the store URL.
        :raises StoreInputError: an unknown query parameter or a bad value.
        """
        path, timeout = parse_sqlite_url(url)
        return cls(path, timeout=timeout)

    def _open(self) -> sqlite3.Connection:
        if self.path != ":memory:":
            folder = os.path.dirname(os.path.abspath(self.path))
            os.makedirs(folder, exist_ok=True)
        conn = sqlite3.connect(self.path, timeout=self.timeout, isolation_level=None)
        conn.execute("PRAGMA foreign_keys = ON")
        if self.path != ":memory:":
            conn.execute("PRAGMA journal_mode = WAL")
        return conn

    def _sql(self, sql: str) -> str:
        return sql.replace("%s", "?")

    def _begin(self, cur: Any) -> None:
        cur.execute("BEGIN IMMEDIATE")

    def _ts(self, dt: datetime) -> str:
        # Fixed-width UTC text sorts in time order.
        return utc(dt).strftime("%Y-%m-%dT%H:%M:%S.%f+00:00")

    def _from_ts(self, value: Any) -> datetime:
        return utc(datetime.fromisoformat(value))

    def _bool(self, value: bool) -> int:
        return 1 if value else 0

    def _table_exists(self, cur: Any, name: str) -> bool:
        cur.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?", (name,))
        return cur.fetchone() is not None
