"""The metric store: where runs and their values live (SPEC section 7).

``open_store(url)`` gives the store for a URL: ``sqlite:///path`` (the embedded default) or
``postgresql://...``.  Inside Airflow, :class:`~airflow_metric_gate.hooks.metric_store.MetricStoreHook`
opens it from an Airflow connection.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager

from airflow_metric_gate.store.base import MetricStore
from airflow_metric_gate.store.errors import StoreError, StoreFailure, StoreInputError, StoreUnavailable
from airflow_metric_gate.store.rows import RunRow, ValueRow
from airflow_metric_gate.store.urls import POSTGRES_SCHEMES, SQLITE_PREFIX, URL_FORMS, safe_url

DEFAULT_STORE_URL = "sqlite:///metric_gate.db"
STORE_URL_ENV = "METRIC_GATE_STORE"

__all__ = [
    "DEFAULT_STORE_URL",
    "STORE_URL_ENV",
    "MetricStore",
    "RunRow",
    "StoreError",
    "StoreFailure",
    "StoreInputError",
    "StoreUnavailable",
    "ValueRow",
    "open_store",
    "opened_store",
    "safe_url",
    "store_url",
]


def store_url(url: str | None = None) -> str:
    """Return the store URL to use: ``url``, else ``$METRIC_GATE_STORE``, else the embedded default.

    :param url: an explicit URL.
    """
    return url or os.environ.get(STORE_URL_ENV) or DEFAULT_STORE_URL


def open_store(url: str | None = None, *, read_only: bool = False) -> MetricStore:
    """Open the store a URL names.

    The URL is checked completely before anything connects (see :mod:`airflow_metric_gate.store.urls`
    for the query parameters and timeouts).

    :param url: ``sqlite:///relative.db``, ``sqlite:////absolute.db``, ``sqlite:///:memory:`` or
        ``postgresql://user[:password]@host:port/db[?connect_timeout=10&statement_timeout=300s...]``;
        ``None`` uses :func:`store_url`.
    :param read_only: for a caller that only reads: a SQLite file must exist already, and nothing
        (neither the file nor its folder) is created (see
        :class:`~airflow_metric_gate.store.sqlite.SQLiteStore`).  A PostgreSQL store is opened as usual.
    :raises StoreInputError: for any other scheme, an unknown query parameter or a bad value (the
        message never shows the password).
    """
    url = store_url(url)
    scheme = url.partition("://")[0].lower() if "://" in url else ""
    if url.startswith(SQLITE_PREFIX):
        from airflow_metric_gate.store.sqlite import SQLiteStore

        return SQLiteStore.from_url(url, read_only=read_only)
    if scheme in POSTGRES_SCHEMES:
        from airflow_metric_gate.store.postgres import PostgresStore

        return PostgresStore.from_url(url)
    raise StoreInputError(f"unsupported store URL {safe_url(url)}: use {URL_FORMS}")


@contextmanager
def opened_store(store: str | MetricStore | None, *, read_only: bool = False) -> Iterator[MetricStore]:
    """Yield a store given as a URL or as an open store, as the Python API takes it.

    An open store is yielded as it is and left open; a URL (``None``: :func:`store_url`) is opened
    with :func:`open_store` and closed at the end.

    :param store: a store URL, an open store or ``None``.
    :param read_only: passed to :func:`open_store` for a URL.
    :raises TypeError: ``store`` is neither.
    """
    if isinstance(store, MetricStore):
        yield store
        return
    if store is not None and not isinstance(store, str):
        raise TypeError(f"store: expected a store URL or an open store, not {type(store).__name__}")
    with open_store(store, read_only=read_only) as opened:
        yield opened
