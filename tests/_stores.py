"""The database behind a store URL, read back by the tests the same way on SQLite and on Postgres.

A test that runs on both stores (the ``store_url`` fixture) checks what was written with plain
SQL: :meth:`StoreDatabase.query` takes ``?`` placeholders on both and gives each value as SQLite
gives it (timestamps as ISO text, JSON as text), so one assertion holds on either backend.
"""

from __future__ import annotations

import json
import sqlite3
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

SQLITE = "sqlite:///"


class StoreDatabase:
    """The database a store URL names.

    :param url: a ``sqlite:///`` or ``postgresql://`` store URL.
    """

    def __init__(self, url: str) -> None:
        self.url = url
        self.backend = "sqlite" if url.startswith(SQLITE) else "postgres"

    def __repr__(self) -> str:
        return f"StoreDatabase({self.backend})"

    def query(self, sql: str, *params: Any) -> list[tuple]:
        """Run one statement and return its rows, values as SQLite gives them.

        :param sql: the statement, with ``?`` placeholders.
        :param params: its parameters.
        """
        if self.backend == "sqlite":
            with sqlite3.connect(self.url[len(SQLITE):]) as conn:
                return conn.execute(sql, params).fetchall()
        import psycopg2

        conn = psycopg2.connect(self.url, connect_timeout=10)
        try:
            with conn.cursor() as cur:
                cur.execute(sql.replace("?", "%s"), params)
                return [tuple(_as_sqlite(value) for value in row) for row in cur.fetchall()]
        finally:
            conn.close()

    def tables(self) -> set[str]:
        """Return the names of the tables in the database (none before the store first opens it)."""
        if self.backend == "sqlite":
            if not Path(self.url[len(SQLITE):]).exists():
                return set()
            return {name for (name,) in self.query("SELECT name FROM sqlite_master WHERE type = 'table'")}
        rows = self.query("SELECT tablename FROM pg_tables WHERE schemaname = current_schema()")
        return {name for (name,) in rows}

    def count(self, table: str) -> int:
        """Return the rows of ``table``: 0 when the store has not created its tables.

        :param table: a table (or view) of the store.
        """
        if "runs" not in self.tables():
            return 0
        ((rows,),) = self.query(f"SELECT COUNT(*) FROM {table}")
        return rows


def _as_sqlite(value: Any) -> Any:
    """One Postgres value as the SQLite store keeps it: timestamps as UTC ISO text, JSON as text."""
    if isinstance(value, datetime):
        return value.astimezone(timezone.utc).isoformat(timespec="microseconds")
    if isinstance(value, (dict, list)):
        return json.dumps(value)
    return value
