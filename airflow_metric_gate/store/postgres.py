"""The production store: PostgreSQL, through an Airflow ``PostgresHook`` or a plain URL.

A run's values are loaded with ``COPY`` inside the run's transaction, after its old rows (if the
run is being written again) are deleted, so a retry replaces its own rows.
"""

from __future__ import annotations

import io
from typing import Any

import psycopg2

from airflow_metric_gate.store.base import VALUE_COLUMNS, MetricStore

_COPY_SQL = f"COPY metric_values ({', '.join(VALUE_COLUMNS)}) FROM STDIN"
_ADVISORY_LOCK_KEY = 0x6D67617465  # "mgate"


_NULL = "\\N"


def _copy_text(value: Any) -> str:
    if value is None:
        return _NULL
    text = str(value)
    if "\\" in text or "\t" in text or "\n" in text or "\r" in text:
        text = text.replace("\\", "\\\\").replace("\t", "\\t").replace("\n", "\\n").replace("\r", "\\r")
    return text


def copy_payload(rows: list[tuple]) -> str:
    """Return rows in ``COPY ... FROM STDIN`` text format.

    The text columns repeat from row to row (one run, a few declarations), so each distinct
    ``(run_id, metric_key, steps_key, constraint_key)`` prefix is escaped once.

    :param rows: tuples in ``metric_values`` column order.
    """
    prefixes: dict[tuple, str] = {}
    out = []
    append = out.append
    for run_id, metric_key, steps_key, constraint_key, step, value, at_step, ordinal in rows:
        key = (run_id, metric_key, steps_key, constraint_key)
        prefix = prefixes.get(key)
        if prefix is None:
            prefix = prefixes[key] = "\t".join(map(_copy_text, key))
        at = _NULL if at_step is None else at_step
        append(f"{prefix}\t{step}\t{float(value)!r}\t{at}\t{ordinal}\n")
    return "".join(out)


def _outage_errors() -> tuple[type[BaseException], ...]:
    errors: list[type[BaseException]] = [psycopg2.OperationalError, psycopg2.InterfaceError]
    try:
        import psycopg

        errors += [psycopg.OperationalError, psycopg.InterfaceError]
    except ImportError:  # pragma: no cover - psycopg 3 is optional
        pass
    return tuple(errors)


def _driver_errors() -> tuple[type[BaseException], ...]:
    errors: list[type[BaseException]] = [psycopg2.Error]
    try:
        import psycopg

        errors.append(psycopg.Error)
    except ImportError:  # pragma: no cover
        pass
    return tuple(errors)


class PostgresStore(MetricStore):
    """The metric store in PostgreSQL.

    :param connect: returns a new DB-API connection (psycopg2, or psycopg 3).
    :param description: names the store in error messages (never includes a password).
    """

    dialect = "postgres"
    _lock_rows = " FOR UPDATE"
    outage_errors = _outage_errors()
    driver_errors = _driver_errors()

    @classmethod
    def from_url(cls, url: str) -> PostgresStore:
        """Open a store from a ``postgresql://`` URL.

        :param url: a libpq connection URL.
        """
        from urllib.parse import urlsplit

        parts = urlsplit(url)
        shown = f"{parts.hostname or 'localhost'}:{parts.port or 5432}{parts.path}"
        return cls(lambda: psycopg2.connect(url), description=f"postgres {shown}")

    @classmethod
    def from_hook(cls, hook: Any) -> PostgresStore:
        """Open a store on an Airflow ``PostgresHook`` (its connection is opened lazily).

        :param hook: a ``PostgresHook`` (or any DB-API hook with ``get_conn()``).
        """
        conn_id = getattr(hook, "postgres_conn_id", None) or getattr(hook, "conn_name_attr", "postgres")
        return cls(hook.get_conn, description=f"postgres connection {conn_id!r}")

    @classmethod
    def from_conn_id(cls, conn_id: str) -> PostgresStore:
        """Open a store on an Airflow connection id through ``PostgresHook``.

        :param conn_id: the Airflow connection id (default of the operators: ``metric_gate_db``).
        """
        from airflow.providers.postgres.hooks.postgres import PostgresHook

        store = cls.from_hook(PostgresHook(postgres_conn_id=conn_id))
        store.description = f"postgres connection {conn_id!r}"
        return store

    def _connection(self) -> Any:
        conn = super()._connection()
        if getattr(conn, "autocommit", False):
            conn.autocommit = False
        return conn

    def _lock_schema(self, cur: Any) -> None:
        cur.execute("SELECT pg_advisory_xact_lock(%s)", (_ADVISORY_LOCK_KEY,))

    def _table_exists(self, cur: Any, name: str) -> bool:
        cur.execute("SELECT to_regclass(%s) IS NOT NULL", (name,))
        return bool(cur.fetchone()[0])

    def _bulk_insert_values(self, cur: Any, rows: list[tuple]) -> None:
        data = copy_payload(rows)
        if hasattr(cur, "copy_expert"):  # psycopg2
            cur.copy_expert(_COPY_SQL, io.StringIO(data))
        else:  # psycopg 3
            with cur.copy(_COPY_SQL) as copy:
                copy.write(data)
