"""The metric store: where runs and their values live (SPEC section 7).

``open_store(url)`` gives the store for a URL: ``sqlite:///path`` (the embedded default) or
``postgresql://...``.  Inside Airflow, :meth:`PostgresStore.from_conn_id` goes through
``PostgresHook``.
"""

from __future__ import annotations

import os

from airflow_metric_gate.store.base import (
    MetricStore,
    RunRow,
    StoreError,
    StoreInputError,
    StoreUnavailable,
    ValueRow,
)

DEFAULT_STORE_URL = "sqlite:///metric_gate.db"
STORE_URL_ENV = "METRIC_GATE_STORE"

__all__ = [
    "DEFAULT_STORE_URL",
    "STORE_URL_ENV",
    "MetricStore",
    "RunRow",
    "StoreError",
    "StoreInputError",
    "StoreUnavailable",
    "ValueRow",
    "open_store",
    "store_url",
]


def store_url(url: str | None = None) -> str:
    """Return the store URL to use: ``url``, else ``$METRIC_GATE_STORE``, else the embedded default.

    :param url: an explicit URL.
    """
    return url or os.environ.get(STORE_URL_ENV) or DEFAULT_STORE_URL


def open_store(url: str | None = None) -> MetricStore:
    """Open the store a URL names.

    :param url: ``sqlite:///relative.db``, ``sqlite:////absolute.db``, ``sqlite:///:memory:`` or
        ``postgresql://user@host:port/db``; ``None`` uses :func:`store_url`.
    :raises StoreInputError: for any other scheme.
    """
    url = store_url(url)
    if url.startswith("sqlite:///"):
        from airflow_metric_gate.store.sqlite import SQLiteStore

        return SQLiteStore(url[len("sqlite:///"):])
    if url.startswith(("postgresql://", "postgres://", "postgresql+psycopg2://")):
        from airflow_metric_gate.store.postgres import PostgresStore

        return PostgresStore.from_url(url.replace("postgresql+psycopg2://", "postgresql://", 1))
    raise StoreInputError(
        f"unsupported store URL {url!r}: use sqlite:///PATH (embedded) or postgresql://USER@HOST:PORT/DB"
    )
