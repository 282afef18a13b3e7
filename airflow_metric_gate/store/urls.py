"""Store URLs: what they may say, their timeouts, and how they are shown without their password.

A store URL is checked completely before any connection is tried, so a typo is bad input
(:class:`StoreInputError`) naming the parameter at fault, never a driver traceback.  Every message
that shows a URL or a driver error goes through :func:`safe_url` or :func:`scrub` first: no
message carries a password.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qsl, quote, unquote, urlsplit

from airflow_metric_gate.store.errors import StoreInputError

POSTGRES_SCHEMES = ("postgresql", "postgres", "postgresql+psycopg2")
SQLITE_PREFIX = "sqlite:///"
URL_FORMS = "sqlite:///PATH (embedded) or postgresql://USER[:PASSWORD]@HOST[:PORT]/DB[?PARAMETER=VALUE&...]"

#: Seconds to wait for the server to accept a new connection and answer its start-up messages.
DEFAULT_CONNECT_TIMEOUT = 10
#: Longest time one statement may run, lock waits included (a night of 100,000 values loads in
#: about a second; the margin is for far larger runs, busy servers and schema migrations).
DEFAULT_STATEMENT_TIMEOUT = "300s"
DEFAULT_STATEMENT_TIMEOUT_MS = 300_000
#: Longest wait for a lock (a row of the same run being written by another writer; a schema upgrade).
DEFAULT_LOCK_TIMEOUT = "60s"
DEFAULT_LOCK_TIMEOUT_MS = 60_000
#: Longest a transaction may sit idle on the server waiting for the client's next statement; past
#: it the server ends the session and its locks go (a client whose connection went silent).
DEFAULT_IDLE_IN_TRANSACTION_TIMEOUT = "60s"
DEFAULT_IDLE_IN_TRANSACTION_TIMEOUT_MS = 60_000
#: How much longer than ``statement_timeout`` the client itself waits for the answer to one statement
#: before it cuts the connection (the server's own cancel has this long to arrive).
CLIENT_TIMEOUT_MARGIN_MS = 30_000
#: TCP keepalives and user timeout set on every connection unless the URL says otherwise: a peer that
#: vanished (a lost network, a host gone) is noticed after about a minute, idle or not.
DEFAULT_KEEPALIVES = {"keepalives": "1", "keepalives_idle": "30", "keepalives_interval": "10", "keepalives_count": "3",
                      "tcp_user_timeout": "60000"}
#: Seconds the embedded store waits for another writer's lock.
DEFAULT_SQLITE_TIMEOUT = 30.0

_INT_MAX = 2**31 - 1
_UNITS_MS = {"ms": 1, "s": 1000, "min": 60_000, "h": 3_600_000, "d": 86_400_000}
_DURATION = re.compile(r"^\s*(\d+)\s*([a-z]*)\s*$")

_SSLMODES = ("disable", "allow", "prefer", "require", "verify-ca", "verify-full")
_SESSION_ATTRS = ("any", "read-write", "read-only", "primary", "standby", "prefer-standby")

#: The query parameters a ``postgresql://`` store URL may carry, with what each means.
POSTGRES_PARAMETERS = {
    "connect_timeout": f"seconds to wait for a new connection (default {DEFAULT_CONNECT_TIMEOUT}; 0 waits forever)",
    "statement_timeout": f"longest run of one statement, lock waits included (default {DEFAULT_STATEMENT_TIMEOUT}; "
    "a number with ms, s, min or h, milliseconds without a unit; 0 turns it off)",
    "sslmode": "one of " + ", ".join(_SSLMODES),
    "sslrootcert": "file of the certificate authorities that sign the server's certificate",
    "sslcert": "file of the client certificate",
    "sslkey": "file of the client certificate's key",
    "sslcrl": "file of revoked server certificates",
    "application_name": "the name the server shows for the connection (pg_stat_activity)",
    "options": "server settings sent at connection start (-c name=value ...)",
    "target_session_attrs": "one of " + ", ".join(_SESSION_ATTRS),
    "host": "the server's host name or Unix-socket folder, when the URL names none",
    "lock_timeout": f"longest wait for a lock (default {DEFAULT_LOCK_TIMEOUT}; a duration as statement_timeout; "
    "0 turns it off)",
    "idle_in_transaction_session_timeout": "longest a transaction may wait on the server for the client's next "
    f"statement before the server ends the session and frees its locks (default {DEFAULT_IDLE_IN_TRANSACTION_TIMEOUT}; "
    "a duration as statement_timeout; 0 turns it off)",
    "client_timeout": "longest the client waits for the answer to one statement before it cuts the connection "
    f"(default statement_timeout + {CLIENT_TIMEOUT_MARGIN_MS // 1000}s, none when statement_timeout is 0; "
    "a duration as statement_timeout; 0 turns it off)",
    "keepalives": "1 (default) or 0: TCP keepalives on the connection",
    "keepalives_idle": "seconds of silence before the first keepalive (default "
    f"{DEFAULT_KEEPALIVES['keepalives_idle']})",
    "keepalives_interval": "seconds between unanswered keepalives (default "
    f"{DEFAULT_KEEPALIVES['keepalives_interval']})",
    "keepalives_count": "unanswered keepalives before the connection counts as lost (default "
    f"{DEFAULT_KEEPALIVES['keepalives_count']})",
    "tcp_user_timeout": "milliseconds sent data may stay unacknowledged before the connection counts as lost "
    f"(default {DEFAULT_KEEPALIVES['tcp_user_timeout']})",
}

#: The parameters the store applies itself (per transaction, or in the client), never passed to libpq.
STORE_SETTINGS = ("connect_timeout", "statement_timeout", "lock_timeout", "idle_in_transaction_session_timeout",
                  "client_timeout")

#: The query parameters of a ``sqlite:///`` store URL.
SQLITE_PARAMETERS = {
    "timeout": f"seconds to wait for another writer's lock (default {DEFAULT_SQLITE_TIMEOUT:g})",
}


# -- showing URLs and driver messages without secrets ----------------------------------------------

#: ``user:password@`` in a URL (up to the last ``@`` of the token: a password may hold an ``@``).
_USERINFO = re.compile(r"(?P<user>(?:^|(?<=[\s'\"(=,])|(?<=//))[^\s:/@'\"(=,]*):(?!//)[^\s'\"]*@")
#: ``password=...`` in a key/value DSN or a URL query.
_PASSWORD_ITEM = re.compile(r"(?P<key>\b\w*password\s*=\s*)(?:'(?:[^'\\]|\\.)*'|[^\s&]*)", re.IGNORECASE)


def scrub(text: str, secrets: Iterable[str] = ()) -> str:
    """Return ``text`` (a message, often a driver's) with passwords replaced by ``***``.

    Passwords in ``user:password@host`` URL forms and ``password=`` items are hidden wherever they
    appear; each string of ``secrets`` (a known password, in every form it was written) is
    hidden too.  Runs of white space (a driver's multi-line message) become one space, so a
    message stays one log line.

    :param text: the text to clean.
    :param secrets: strings that must not appear.
    """
    for secret in sorted({s for s in secrets if s}, key=len, reverse=True):
        text = text.replace(secret, "***")
    text = _USERINFO.sub(lambda m: f"{m['user']}:***@", text)
    text = _PASSWORD_ITEM.sub(lambda m: f"{m['key']}***", text)
    return " ".join(text.split())


def safe_url(url: str) -> str:
    """Render a store URL (or DSN, or anything a user gave as one) for a message.

    A URL shows as ``scheme://user:***@host:port/db``: the password replaced by ``***`` and the
    query left out (it may hold other secrets).  Anything else is shown through :func:`scrub`.

    :param url: the URL as given.
    """
    try:
        parts = urlsplit(url)
    except ValueError:
        return scrub(url)
    if not parts.scheme or not url.startswith(f"{parts.scheme}://"):
        return scrub(url)
    userinfo, at, hostport = parts.netloc.rpartition("@")
    user, colon, _ = userinfo.partition(":")
    shown = f"{user}{':***' if colon else ''}{at}{hostport}"
    return scrub(f"{parts.scheme}://{shown}{parts.path}")


def _url_secrets(netloc: str) -> tuple[str, ...]:
    userinfo, at, _ = netloc.rpartition("@")
    if not at or ":" not in userinfo:
        return ()
    raw = userinfo.partition(":")[2]
    return tuple({raw, unquote(raw), quote(unquote(raw), safe="")} - {""})


# -- durations -------------------------------------------------------------------------------------


def duration_ms(name: str, value: Any, *, unit: str, where: str) -> int:
    """Return a duration setting in milliseconds.

    :param name: the setting, named in the error message.
    :param value: ``30``, ``"30"``, ``"30s"``, ``"500ms"``, ``"2min"``, ``"1h"``.
    :param unit: the unit of a bare number (``s`` or ``ms``).
    :param where: where the setting was read, for the error message.
    :raises StoreInputError: not a non-negative whole number with a known unit, or too large.
    """
    match = None
    if isinstance(value, int) and not isinstance(value, bool):
        match = _DURATION.match(str(value))
    elif isinstance(value, str):
        match = _DURATION.match(value.lower())
    if match is None or (match[2] or unit) not in _UNITS_MS:
        raise StoreInputError(
            f"{where}: {name} must be a whole number of {'seconds' if unit == 's' else 'milliseconds'} "
            f"or a number with a unit (ms, s, min, h), got {value!r}"
        )
    ms = int(match[1]) * _UNITS_MS[match[2] or unit]
    if ms > _INT_MAX:
        raise StoreInputError(f"{where}: {name} is too large (at most {_INT_MAX} ms), got {value!r}")
    return ms


def _whole_seconds(name: str, value: Any, where: str) -> int:
    ms = duration_ms(name, value, unit="s", where=where)
    if ms % 1000:
        raise StoreInputError(f"{where}: {name} must be a whole number of seconds, got {value!r}")
    return ms // 1000


@dataclass(frozen=True)
class Timeouts:
    """The limits every store connection has.

    :param connect: seconds to wait for a new connection (0: forever).
    :param statement_ms: milliseconds one statement may run (0: no limit).
    :param lock_ms: milliseconds a statement may wait for a lock (0: no limit).
    :param idle_ms: milliseconds a transaction may wait on the server for the client (0: no limit).
    :param client_ms: milliseconds the client waits for one answer before cutting the connection;
        ``None``: ``statement_ms`` plus :data:`CLIENT_TIMEOUT_MARGIN_MS` (no limit when that is 0).
    """

    connect: int = DEFAULT_CONNECT_TIMEOUT
    statement_ms: int = DEFAULT_STATEMENT_TIMEOUT_MS
    lock_ms: int = DEFAULT_LOCK_TIMEOUT_MS
    idle_ms: int = DEFAULT_IDLE_IN_TRANSACTION_TIMEOUT_MS
    client_ms: int | None = None

    @property
    def client_wait_ms(self) -> int:
        """Milliseconds the client waits for the answer to one statement (0: forever)."""
        if self.client_ms is not None:
            return self.client_ms
        return self.statement_ms + CLIENT_TIMEOUT_MARGIN_MS if self.statement_ms else 0

    @classmethod
    def read(cls, settings: Mapping[str, Any], where: str) -> Timeouts:
        """Read the timeouts (:data:`STORE_SETTINGS`) from a URL query or connection extras.

        :param settings: the query parameters or extras (other keys are ignored here).
        :param where: names the source in error messages.
        :raises StoreInputError: a value is not a valid duration.
        """
        timeouts = cls()
        connect = timeouts.connect
        if settings.get("connect_timeout") is not None:
            connect = _whole_seconds("connect_timeout", settings["connect_timeout"], where)

        def ms(name: str, default: int) -> int:
            value = settings.get(name)
            return default if value is None else duration_ms(name, value, unit="ms", where=where)

        client = settings.get("client_timeout")
        return cls(connect, ms("statement_timeout", timeouts.statement_ms), ms("lock_timeout", timeouts.lock_ms),
                   ms("idle_in_transaction_session_timeout", timeouts.idle_ms),
                   None if client is None else duration_ms("client_timeout", client, unit="ms", where=where))

    def describe_statement(self) -> str:
        """``statement_timeout=300s`` as a message shows it."""
        ms = self.statement_ms
        return f"statement_timeout={ms // 1000}s" if ms % 1000 == 0 else f"statement_timeout={ms}ms"


# -- parsing ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class PostgresTarget:
    """A checked ``postgresql://`` store URL.

    :param connect_kwargs: keyword arguments of the driver's ``connect`` (password included).
    :param timeouts: the connection's timeouts.
    :param shown: the URL as messages show it (no password).
    :param secrets: every form of the password, to hide from driver messages.
    """

    connect_kwargs: dict
    timeouts: Timeouts
    shown: str
    secrets: tuple[str, ...] = ()


def _query(query: str, known: Mapping[str, str], where: str) -> dict[str, str]:
    params: dict[str, str] = {}
    for name, value in parse_qsl(query, keep_blank_values=True):
        if name not in known:
            raise StoreInputError(
                f"{where}: unknown query parameter {name!r}; known: {', '.join(sorted(known))}"
            )
        if name in params:
            raise StoreInputError(f"{where}: query parameter {name!r} is given twice")
        if "\0" in value:
            raise StoreInputError(f"{where}: query parameter {name!r} holds a NUL character")
        params[name] = value
    return params


def parse_postgres_url(url: str) -> PostgresTarget:
    """Check a ``postgresql://`` store URL and return what connecting needs.

    :param url: ``postgresql://USER[:PASSWORD]@HOST[:PORT]/DB[?PARAMETER=VALUE&...]`` (also
        ``postgres://`` and ``postgresql+psycopg2://``); see :data:`POSTGRES_PARAMETERS`.
    :raises StoreInputError: the URL is malformed, has an unknown parameter or a bad value.
    """
    shown = safe_url(url)
    where = f"store URL {shown}"
    try:
        parts = urlsplit(url)
        host, port = parts.hostname, parts.port
    except ValueError:
        raise StoreInputError(
            f"{where}: not a valid URL, or the port is not a number from 1 to 65535 "
            "(percent-encode @ : / ? # in a password)"
        ) from None
    secrets = _url_secrets(parts.netloc)
    if host and "," in parts.netloc.rpartition("@")[2]:
        raise StoreInputError(f"{where}: a store URL names one host")
    params = _query(parts.query, POSTGRES_PARAMETERS, where)
    timeouts = Timeouts.read(params, where)
    if "sslmode" in params and params["sslmode"] not in _SSLMODES:
        raise StoreInputError(f"{where}: sslmode must be one of {', '.join(_SSLMODES)}, got {params['sslmode']!r}")
    if "target_session_attrs" in params and params["target_session_attrs"] not in _SESSION_ATTRS:
        raise StoreInputError(
            f"{where}: target_session_attrs must be one of {', '.join(_SESSION_ATTRS)}, "
            f"got {params['target_session_attrs']!r}"
        )
    if "keepalives" in params and params["keepalives"] not in ("0", "1"):
        raise StoreInputError(f"{where}: keepalives must be 0 or 1, got {params['keepalives']!r}")
    for name in ("keepalives_idle", "keepalives_interval", "keepalives_count", "tcp_user_timeout"):
        if name in params and not (params[name].isdigit() and int(params[name]) <= _INT_MAX):
            raise StoreInputError(f"{where}: {name} must be a whole number >= 0, got {params[name]!r}")
    if host and "host" in params:
        raise StoreInputError(f"{where}: the host is given twice (in the URL and as ?host=)")
    userinfo = parts.netloc.rpartition("@")[0]
    user, _, password = userinfo.partition(":")
    kwargs: dict[str, Any] = {
        "host": host or None,
        "port": port,
        "user": unquote(user) or None,
        "password": unquote(password) or None,
        "dbname": unquote(parts.path.lstrip("/")) or None,
    }
    kwargs.update({k: v for k, v in params.items() if k not in STORE_SETTINGS})
    for name, value in DEFAULT_KEEPALIVES.items():
        kwargs.setdefault(name, value)
    kwargs["connect_timeout"] = timeouts.connect
    kwargs = {k: v for k, v in kwargs.items() if v is not None}
    return PostgresTarget(kwargs, timeouts, shown, secrets)


def parse_sqlite_url(url: str) -> tuple[str, float]:
    """Check a ``sqlite:///`` store URL and return the database path and the lock timeout.

    :param url: ``sqlite:///relative.db``, ``sqlite:////absolute.db`` or ``sqlite:///:memory:``,
        optionally with ``?timeout=SECONDS``.
    :raises StoreInputError: an unknown parameter or a bad value.
    """
    path, _, query = url[len(SQLITE_PREFIX):].partition("?")
    where = f"store URL {safe_url(url)}"
    params = _query(query, SQLITE_PARAMETERS, where)
    timeout = DEFAULT_SQLITE_TIMEOUT
    if "timeout" in params:
        timeout = _whole_seconds("timeout", params["timeout"], where)
    if not path:
        raise StoreInputError(f"{where}: names no database file (sqlite:///PATH)")
    return path, timeout
