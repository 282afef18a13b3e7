"""The embedded SQLite store: the default for local runs, trials and quick starts."""

from __future__ import annotations

import os
import sqlite3
from datetime import datetime
from typing import Any

from airflow_metric_gate.dates import utc
from airflow_metric_gate.store.base import MetricStore
from airflow_metric_gate.store.errors import StoreInputError
from airflow_metric_gate.store.urls import DEFAULT_SQLITE_TIMEOUT, parse_sqlite_url


class SQLiteStore(MetricStore):
    """The metric store in one SQLite file (same schema and answers as Postgres).

    :param path: the database file; created with its folder on first use. ``":memory:"`` works too.
    :param timeout: seconds to wait for a lock held by another writer.
    :param read_only: for a caller that only reads: the file must exist (a missing one is
        :class:`StoreInputError`, and nothing is created).  Ignored for ``":memory:"``.
    """

    dialect = "sqlite"
    outage_errors = (sqlite3.OperationalError,)
    driver_errors = (sqlite3.Error,)

    def __init__(
        self, path: str | os.PathLike, *, timeout: float = DEFAULT_SQLITE_TIMEOUT, read_only: bool = False
    ) -> None:
        self.path = os.fspath(path)
        self.timeout = timeout
        self.read_only = read_only and self.path != ":memory:"
        super().__init__(self._open, description=f"sqlite {self.path}")

    @classmethod
    def from_url(cls, url: str, *, read_only: bool = False) -> SQLiteStore:
        """Open a store from a ``sqlite:///PATH[?timeout=SECONDS]`` URL.

        :param url: the store URL.
        :param read_only: see the class.
        :raises StoreInputError: an unknown query parameter or a bad value.
        """
        path, timeout = parse_sqlite_url(url)
        return cls(path, timeout=timeout, read_only=read_only)

    def _open(self) -> sqlite3.Connection:
        if self.read_only and not os.path.isfile(self.path):
            raise StoreInputError(
                f"no metric store at {self.path}: a command that only reads creates none (check --store; "
                "`metric-gate run` or `metric-gate db upgrade` creates the store)"
            )
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
