"""The embedded SQLite store: the default for local runs, trials and quick starts."""

from __future__ import annotations

import os
import sqlite3
from datetime import datetime
from pathlib import Path
from typing import Any

from airflow_metric_gate.dates import utc
from airflow_metric_gate.paths import location_text
from airflow_metric_gate.store.base import MetricStore
from airflow_metric_gate.store.errors import StoreInputError
from airflow_metric_gate.store.urls import DEFAULT_SQLITE_TIMEOUT, parse_sqlite_url


class SQLiteStore(MetricStore):
    """The metric store in one SQLite file (same schema and answers as Postgres).

    :param path: the database file; created with its folder on first use. ``":memory:"`` works too.
    :param timeout: seconds to wait for a lock held by another writer.
    :param read_only: for a caller that only reads: the file must exist (a missing one is
        :class:`StoreInputError`, and nothing is created), and it is opened read-only, so a file
        this user may read but not write serves too.  Its journal mode is left as it is, and its
        schema is checked, never created or upgraded.  When SQLite cannot create the file's
        shared-memory file (``-shm``, for a file in WAL mode whose folder this user cannot write),
        the store is refused (:class:`StoreInputError`) rather than read without it, which could
        misread pages a writer is checkpointing.  Ignored for ``":memory:"``.
    """

    dialect = "sqlite"
    #: SQLite binds at most 32766 parameters from version 3.32, 999 before.
    max_parameters = 16000 if sqlite3.sqlite_version_info >= (3, 32, 0) else 900
    outage_errors = (sqlite3.OperationalError,)
    driver_errors = (sqlite3.Error,)

    def __init__(
        self, path: str | os.PathLike, *, timeout: float = DEFAULT_SQLITE_TIMEOUT, read_only: bool = False
    ) -> None:
        self.path = location_text(path)
        self.timeout = timeout
        self.read_only = read_only and self.path != ":memory:"
        self._codec: str | None | object = _UNKNOWN  # how the file stores text (see _in_key_order)
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
        if self.read_only:
            return self._open_read_only()
        if self.path != ":memory:":
            folder = os.path.dirname(os.path.abspath(self.path))
            try:
                os.makedirs(folder, exist_ok=True)
            except OSError as exc:  # a permission or a file in the way: no retry cures it
                raise StoreInputError(
                    f"cannot create the folder of the metric store {self.path}: {exc.strerror}"
                ) from exc
            if _read_only_file_system(folder):
                raise StoreInputError(
                    f"cannot write the metric store {self.path}: its folder is on a file system mounted read-only; "
                    "a command that writes needs a writable store (another --store, or remount it read-write), "
                    "and retrying will not help"
                )
            if not os.path.exists(self.path) and not os.access(folder, os.W_OK | os.X_OK):
                raise StoreInputError(
                    f"cannot create the metric store {self.path}: its folder is not writable by this user"
                )
        conn = sqlite3.connect(self.path, timeout=self.timeout, isolation_level=None)
        conn.execute("PRAGMA foreign_keys = ON")
        if self.path != ":memory:":
            conn.execute("PRAGMA journal_mode = WAL")
        return conn

    def _open_read_only(self) -> sqlite3.Connection:
        if not os.path.isfile(self.path):
            raise StoreInputError(
                f"no metric store at {self.path}: a command that only reads creates none (check --store; "
                "`metric-gate run` or `metric-gate db upgrade` creates the store)"
            )
        if not os.access(self.path, os.R_OK):
            raise StoreInputError(f"cannot read the metric store {self.path}: this user may not read the file")
        folder = os.path.dirname(os.path.abspath(self.path))
        if os.access(self.path, os.W_OK) and os.access(folder, os.W_OK | os.X_OK):
            # a user who may write opens it as writers do (no journal switch, no schema step follows): the
            # last connection to close then folds the -wal file back and removes it and the -shm file
            return sqlite3.connect(self.path, timeout=self.timeout, isolation_level=None)
        uri = f"{Path(os.path.abspath(self.path)).as_uri()}?mode=ro"
        conn = sqlite3.connect(uri, uri=True, timeout=self.timeout, isolation_level=None)
        try:
            conn.execute("SELECT count(*) FROM sqlite_master").fetchone()  # opens a WAL file's index
            return conn
        except sqlite3.OperationalError as exc:
            conn.close()
            if not (_is_read_only_error(exc) or _has_code(exc, _SQLITE_CANTOPEN)) or os.access(folder, os.W_OK):
                raise
            # A WAL file whose folder this user cannot write: SQLite cannot create its shared-memory
            # file.  Reading the file as an immutable snapshot instead could read pages a writer is
            # checkpointing at that moment, so the store is refused rather than misread.
            raise StoreInputError(
                f"cannot read the metric store {self.path}: SQLite needs to create {self.path}-shm next to it "
                f"to read it safely, and this user cannot write to its folder ({self._error_text(exc)}); "
                "read it as a user who may write to the folder, or read a copy of the file"
            ) from exc

    def _refusal(self, exc: BaseException) -> str | None:
        if not isinstance(exc, sqlite3.Error):
            return None
        if not self.read_only and self.path != ":memory:" and _has_code(exc, _SQLITE_CANTOPEN):
            folder = os.path.dirname(os.path.abspath(self.path))
            if _read_only_file_system(folder) or not os.access(folder, os.W_OK | os.X_OK):
                # the file exists but its -wal and -shm files cannot be created next to it
                return (
                    f"cannot write the metric store {self.path}: its folder is not writable (read-only file system "
                    f"or permissions: {self._error_text(exc)}); a command that writes needs to create "
                    f"{self.path}-wal and -shm there, and retrying will not help"
                )
        if not _is_read_only_error(exc):
            return None
        return (
            f"the file {self.path}, its folder, or its -wal or -shm file is not writable by this user "
            f"({self._error_text(exc)}); "
            "a command that writes needs write access to all of them, and retrying will not help"
        )

    def _in_key_order(self, blocks: list[list]) -> list[tuple[str, str, str, int]]:
        # SQLite compares text with memcmp() in the file's own encoding: UTF-8 bytes sort as Python
        # compares code points, UTF-16 bytes (a file created with another PRAGMA encoding) do not
        if self._codec is _UNKNOWN:  # fixed for the file's life: asked once
            with self._transaction(schema=False) as cur:
                cur.execute("PRAGMA encoding")
                self._codec = _CODECS[cur.fetchone()[0]]
        codec = self._codec
        if codec is None:
            return sorted(tuple(b) for b in blocks)
        return sorted((tuple(b) for b in blocks), key=lambda b: tuple(k.encode(codec) for k in b[:3]))

    def _sql(self, sql: str) -> str:
        return sql.replace("%s", "?")

    def _begin(self, cur: Any) -> None:
        # a writer takes the write lock up front; a read-only connection cannot take it
        cur.execute("BEGIN" if self.read_only else "BEGIN IMMEDIATE")

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


#: SQLite's primary result codes (the extended codes, such as ``SQLITE_READONLY_DIRECTORY``, share
#: them in their low byte): writing to a read-only database, and a file that cannot be opened.
_SQLITE_READONLY = 8
_SQLITE_CANTOPEN = 14


#: Their messages, for Python before 3.11 (no ``sqlite_errorcode``).
_MESSAGES = {_SQLITE_READONLY: "readonly database", _SQLITE_CANTOPEN: "unable to open database file"}


def _has_code(exc: BaseException, code: int) -> bool:
    """Whether a SQLite error has this primary result code."""
    full = getattr(exc, "sqlite_errorcode", None)
    if full is not None:
        return full & 0xFF == code
    return _MESSAGES[code] in str(exc)


def _is_read_only_error(exc: BaseException) -> bool:
    """Whether a SQLite error says the database, or its folder, cannot be written."""
    return _has_code(exc, _SQLITE_READONLY)


def _read_only_file_system(folder: str) -> bool:
    """Whether the file system holding ``folder`` (or its nearest existing parent) is mounted read-only."""
    path = folder
    while True:
        try:
            return bool(os.statvfs(path).f_flag & os.ST_RDONLY)
        except FileNotFoundError:
            parent = os.path.dirname(path)
            if parent == path:
                return False
            path = parent
        except (OSError, AttributeError):  # no statvfs (Windows), or not allowed to ask: let SQLite say
            return False


_UNKNOWN = object()

#: How a SQLite file stores text (``PRAGMA encoding``), as a Python codec; ``None``: UTF-8.
_CODECS = {"UTF-8": None, "UTF-16le": "utf-16-le", "UTF-16be": "utf-16-be"}
