"""The metric store behind an Airflow connection: which store, its timeouts, and the UI's Test button.

Three connection types open the store:

* ``metric_gate`` (this package's own): host, port, database, login and password of the Postgres
  store, with ``connect_timeout``, ``statement_timeout`` and the other query parameters of a
  store URL as extras; or, with the ``sqlite_path`` extra, the embedded SQLite store.  The
  Airflow UI shows its form fields and its Test button works.
* ``postgres``: an ordinary Postgres connection, opened through ``PostgresHook``, with the same
  two timeout extras (how the store's connection was made before this type existed).
* ``sqlite``: the embedded store at the connection's host (or schema) path, for local trials.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import quote, urlencode

from airflow.sdk import BaseHook, conf
from airflow.sdk.exceptions import AirflowNotFoundException

from airflow_metric_gate.hooks import CONN_TYPE, DEFAULT_CONN_ID, HOOK_NAME
from airflow_metric_gate.store import MetricStore, StoreError, StoreInputError, StoreUnavailable, open_store
from airflow_metric_gate.store.urls import DEFAULT_KEEPALIVES, POSTGRES_PARAMETERS, STORE_SETTINGS, Timeouts, scrub

POSTGRES_CONN_TYPES = ("postgres", "postgresql")

_SQLITE_FIELDS = ("host", "login", "password")


def resolve_conn_id(conn_id: str | None) -> str:
    """Return the store's Airflow connection id: ``conn_id``, else ``[metric_gate] conn_id``.

    :param conn_id: an explicit connection id; ``None`` or blank (a template rendering nothing)
        uses the option, whose default is ``metric_gate_db``.
    """
    if isinstance(conn_id, str) and conn_id.strip():
        return conn_id.strip()
    return conf.get("metric_gate", "conn_id", fallback=DEFAULT_CONN_ID) or DEFAULT_CONN_ID


def _extra(connection: Any) -> dict[str, Any]:
    """The connection's extras, form fields saved with the ``extra__metric_gate__`` prefix unprefixed."""
    extra = dict(connection.extra_dejson or {})
    prefix = f"extra__{CONN_TYPE}__"
    for key in [k for k in extra if k.startswith(prefix)]:
        value = extra.pop(key)
        extra.setdefault(key[len(prefix):], value)
    return {k: v for k, v in extra.items() if v not in (None, "")}


def _password_forms(password: str | None) -> tuple[str, ...]:
    """Return a connection's password in every form a message may show it: as written and percent-encoded."""
    password = password or ""
    return (password, quote(password, safe=""))


class MetricStoreHook(BaseHook):
    """Open the metric store behind an Airflow connection (``metric_gate``, ``postgres`` or ``sqlite``).

    The hook raises the store's own errors: :class:`~airflow_metric_gate.store.StoreInputError` for
    a connection that is not defined, cannot hold the store or has a bad extra, and for a store
    that refuses its database, user, password or grants (bad input);
    :class:`~airflow_metric_gate.store.StoreUnavailable` when a secrets backend cannot be read or
    the store cannot be reached (retryable).  No message carries the connection's password.

    :param metric_gate_conn_id: the Airflow connection id; ``None`` uses the ``[metric_gate] conn_id``
        option (default ``metric_gate_db``).
    :param kwargs: passed to :class:`~airflow.sdk.BaseHook`.
    """

    conn_name_attr = "metric_gate_conn_id"
    default_conn_name = DEFAULT_CONN_ID
    conn_type = CONN_TYPE
    hook_name = HOOK_NAME

    def __init__(self, metric_gate_conn_id: str | None = None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.metric_gate_conn_id = resolve_conn_id(metric_gate_conn_id)

    # -- the store -------------------------------------------------------------------------------

    def get_conn(self) -> MetricStore:
        """Return the store (what :meth:`get_store` returns; the name other hooks use)."""
        return self.get_store()

    def _connection(self) -> Any:
        conn_id = self.metric_gate_conn_id
        try:
            return self.get_connection(conn_id)
        except AirflowNotFoundException:  # no secrets backend knows it: a configuration error, not an outage
            raise StoreInputError(
                f"Airflow connection {conn_id!r} of the metric store is not defined; create it as a {CONN_TYPE} (or "
                f"postgres) connection, set [metric_gate] conn_id, or pass conn_id= (retrying will not help)"
            ) from None
        except Exception as err:
            text = " ".join(str(err).split())
            shown = scrub(text)
            raise StoreUnavailable(
                f"cannot read Airflow connection {conn_id!r} of the metric store ({shown}); create it as a "
                f"{CONN_TYPE} (or postgres) connection, or pass conn_id="
            ) from (err if shown == text else None)

    def _secrets(self) -> tuple[str, ...]:
        """Return the connection's password as written and percent-encoded (nothing if it cannot be read)."""
        try:
            password = self._connection().password
        except Exception:  # the message being cleaned may be this very failure: nothing more to hide
            return ()
        return _password_forms(password)

    def get_store(self) -> MetricStore:
        """Open the store (nothing connects until the store is first used; use it in a ``with`` block).

        :raises StoreInputError: the connection is not defined, its type cannot hold the store, or an
            extra is invalid.
        :raises StoreUnavailable: the connection cannot be read (secrets backends have outages).
        """
        conn_id = self.metric_gate_conn_id
        connection = self._connection()
        conn_type = (connection.conn_type or "").lower().replace("-", "_")
        if conn_type in POSTGRES_CONN_TYPES:
            return self._postgres_hook_store()
        if conn_type == "sqlite":
            path = connection.host or connection.schema
            if not path:
                raise StoreInputError(f"sqlite connection {conn_id!r} names no database file")
            return open_store(f"sqlite:///{path}")
        if conn_type == CONN_TYPE:
            return self._metric_gate_store(connection)
        raise StoreInputError(
            f"connection {conn_id!r} is of type {conn_type or 'unknown'!r}; the metric store needs a "
            f"{CONN_TYPE} or postgres connection (or sqlite for local trials)"
        )

    def store_location(self) -> dict[str, Any]:
        """Where the store is, for data lineage: ``dialect``, ``database``, ``host``, ``port`` (no login, no password).

        :raises StoreInputError: the connection is not defined.
        """
        connection = self._connection()
        conn_type = (connection.conn_type or "").lower().replace("-", "_")
        extra = _extra(connection)
        if conn_type == "sqlite" or (conn_type == CONN_TYPE and extra.get("sqlite_path") is not None):
            path = extra.get("sqlite_path") or connection.host or connection.schema
            return {"dialect": "sqlite", "database": str(path)}
        host = connection.host or extra.get("host")
        return {"dialect": "postgres", "database": connection.schema or extra.get("dbname") or "postgres",
                "host": host, "port": connection.port or extra.get("port")}

    def _metric_gate_store(self, connection: Any) -> MetricStore:
        conn_id = self.metric_gate_conn_id
        extra = _extra(connection)
        sqlite_path = extra.pop("sqlite_path", None)
        if sqlite_path is not None:
            given = [name for name in _SQLITE_FIELDS if getattr(connection, name, None)]
            if given:
                raise StoreInputError(
                    f"connection {conn_id!r} names both a SQLite file (sqlite_path) and a Postgres "
                    f"{', '.join(given)}; keep one"
                )
            return open_store(f"sqlite:///{sqlite_path}")
        unknown = sorted(set(extra) - set(POSTGRES_PARAMETERS))
        if unknown:
            raise StoreInputError(
                f"extra of Airflow connection {conn_id!r}: unknown field(s) {', '.join(unknown)}; known: "
                f"sqlite_path, {', '.join(sorted(POSTGRES_PARAMETERS))}"
            )
        if not connection.host and "host" not in extra:
            raise StoreInputError(f"connection {conn_id!r} names no host (nor a SQLite file in sqlite_path)")
        userinfo = ""
        if connection.login:
            userinfo = quote(connection.login, safe="")
            if connection.password:
                userinfo += ":" + quote(connection.password, safe="")
            userinfo += "@"
        port = f":{connection.port}" if connection.port else ""
        host = connection.host or ""
        query = urlencode({k: str(v) for k, v in extra.items()})
        url = f"postgresql://{userinfo}{host}{port}/{quote(connection.schema or '', safe='')}"
        from airflow_metric_gate.store.postgres import PostgresStore

        try:
            store = PostgresStore.from_url(url + (f"?{query}" if query else ""))
        except StoreInputError as err:  # the URL shown in the message has no password (safe_url)
            raise StoreInputError(f"{CONN_TYPE} connection {conn_id!r}: {err}") from None
        store.description = f"{CONN_TYPE} connection {conn_id!r}"
        return store

    def _postgres_hook_store(self) -> MetricStore:
        """The store on a ``postgres`` connection, through ``PostgresHook`` (extras as the hook reads them)."""
        import json

        from airflow.providers.postgres.hooks.postgres import PostgresHook

        from airflow_metric_gate.store.postgres import PostgresStore

        conn_id = self.metric_gate_conn_id
        hook = PostgresHook(postgres_conn_id=conn_id)
        connection = hook.connection
        extra = dict(connection.extra_dejson)
        timeouts = Timeouts.read(extra, f"extra of Airflow connection {conn_id!r}")
        # the timeouts are not libpq options: the store sets them per transaction, or bounds its own waits
        for name in STORE_SETTINGS:
            extra.pop(name, None)
        extra["connect_timeout"] = timeouts.connect
        for name, value in DEFAULT_KEEPALIVES.items():
            extra.setdefault(name, value)
        connection.extra = json.dumps(extra)
        store = PostgresStore.from_hook(hook, timeouts=timeouts, secrets=_password_forms(connection.password))
        store.description = f"postgres connection {conn_id!r}"
        return store

    # -- the UI's Test button --------------------------------------------------------------------

    def test_connection(self) -> tuple[bool, str]:
        """Connect to the store and read its schema version (nothing is created or written).

        :return: whether the store answered, and a message without the password.
        """
        try:
            with self.get_store() as store:
                version = store.schema_version()
                where = store.description
        except StoreError as err:
            return False, scrub(str(err), secrets=self._secrets())
        except Exception as err:  # the UI shows the message; an unexpected error must not leak secrets
            return False, scrub(f"{type(err).__name__}: {err}", secrets=self._secrets())
        from airflow_metric_gate.store.schema import SCHEMA_VERSION

        if version == 0:
            state = f"schema not created yet (the first stored run creates version {SCHEMA_VERSION})"
        elif version < SCHEMA_VERSION:
            state = f"schema version {version}, upgraded to {SCHEMA_VERSION} by the next stored run"
        else:
            state = f"schema version {version}"
        return True, f"Connected to the metric store ({where}): {state}"

