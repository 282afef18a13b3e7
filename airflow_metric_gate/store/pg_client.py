"""The PostgreSQL client's side: the watchdog that bounds a wait for the server, and what its errors mean.

The server enforces its own timeouts; these pieces bound what only the client can see (a server
or a network that keeps the connection open and says nothing), and tell an outage (retry) from a
refusal of the settings or grants (fix them).
"""

from __future__ import annotations

import os
import socket
import threading
import time
from contextlib import AbstractContextManager
from typing import Any, Protocol

import psycopg2

#: SQLSTATE of a statement cancelled (``statement_timeout``).
_QUERY_CANCELED = "57014"
#: SQLSTATE of a lock not taken within ``lock_timeout``.
_LOCK_NOT_AVAILABLE = "55P03"


class _Waits(Protocol):
    def _waiting(self) -> AbstractContextManager[None]: ...


#: SQLSTATEs of the server's refusals that no retry cures: the settings or the grants are wrong.
REFUSED_SQLSTATES = {
    "3D000": "the database does not exist",
    "28000": "the server refused this user (role unknown, or no pg_hba.conf entry lets it in)",
    "28P01": "the password was refused",
    "42501": "permission denied",
    "3F000": "the schema does not exist",
}

#: What libpq says when a connection is refused for its settings (a refusal at connection time
#: carries no SQLSTATE in psycopg2): (text in the message, what it means).
REFUSED_AT_CONNECT = (
    ("password authentication failed", "the password was refused"),
    ("no password supplied", "the server asks for a password and none was given"),
    ("no pg_hba.conf entry", "the server's pg_hba.conf lets no such connection in"),
    ("permission denied", "permission denied"),
    ("does not exist", "the database or the role does not exist"),
    ("authentication failed", "authentication failed"),
    ("is not permitted to log in", "the role may not log in"),
)


def _sqlstate(exc: BaseException) -> str | None:
    """The SQLSTATE of a psycopg2 or psycopg 3 error, if it has one."""
    return getattr(exc, "pgcode", None) or getattr(getattr(exc, "diag", None), "sqlstate", None)


#: Seconds an unarmed watchdog thread waits before it ends.
_WATCHDOG_IDLE_S = 30.0


class _Watchdog:
    """Cuts a connection whose answer has not come within a deadline (one daemon thread per store).

    libpq waits for the server's answer without a limit of its own: a server (or a proxy, a
    firewall) that keeps the TCP connection open and says nothing would hold the client forever.
    While armed, the watchdog shuts the connection's socket down at the deadline; the blocked call
    then fails at once as a lost connection.
    """

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._deadline: float | None = None
        self._fd: int | None = None
        self._thread: threading.Thread | None = None
        #: Whether the last armed wait was cut.
        self.fired = False

    def arm(self, fd: int, seconds: float) -> None:
        with self._cond:
            self._fd, self._deadline, self.fired = fd, time.monotonic() + seconds, False
            if self._thread is None:
                self._thread = threading.Thread(target=self._watch, name="metric-gate-store-watchdog", daemon=True)
                self._thread.start()
            self._cond.notify()

    def disarm(self) -> None:
        with self._cond:
            self._fd = self._deadline = None

    def _watch(self) -> None:
        with self._cond:
            while True:
                if self._deadline is None:
                    # an idle watchdog ends (a store opened per request leaves no thread behind)
                    if not self._cond.wait(_WATCHDOG_IDLE_S) and self._deadline is None:
                        self._thread = None
                        return
                    continue
                remaining = self._deadline - time.monotonic()
                if remaining > 0:
                    self._cond.wait(remaining)
                    continue
                fd, self._fd, self._deadline = self._fd, None, None
                if fd is not None:
                    self.fired = True
                    _shut_down(fd)


def _shut_down(fd: int) -> None:
    """Shut a socket down for both directions (its descriptor stays the driver's to close)."""
    try:
        with socket.socket(fileno=os.dup(fd)) as sock:
            sock.shutdown(socket.SHUT_RDWR)
    except OSError:  # already closed
        pass


class _BoundedCursor:
    """A driver cursor whose calls that wait for the server are bounded by the store's watchdog."""

    _WAITING = ("execute", "executemany", "copy_expert", "callproc")

    def __init__(self, cursor: Any, store: _Waits) -> None:
        self._cursor = cursor
        self._store = store

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._cursor, name)
        if name not in self._WAITING:
            return attr

        def bounded(*args: Any, **kwargs: Any) -> Any:
            with self._store._waiting():
                return attr(*args, **kwargs)

        return bounded


def outage_errors() -> tuple[type[BaseException], ...]:
    errors: list[type[BaseException]] = [psycopg2.OperationalError, psycopg2.InterfaceError]
    try:
        import psycopg

        errors += [psycopg.OperationalError, psycopg.InterfaceError]
    except ImportError:  # pragma: no cover - psycopg 3 is optional
        pass
    return tuple(errors)


def driver_errors() -> tuple[type[BaseException], ...]:
    errors: list[type[BaseException]] = [psycopg2.Error]
    try:
        import psycopg

        errors.append(psycopg.Error)
    except ImportError:  # pragma: no cover
        pass
    return tuple(errors)
