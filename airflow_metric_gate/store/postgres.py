"""The production store: PostgreSQL, through a plain URL or a DB-API hook (``PostgresHook``).

A run's values are loaded with ``COPY`` inside the run's transaction, after its old rows (if the
run is being written again) are deleted, so a retry replaces its own rows.
"""

from __future__ import annotations

import io
import logging
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from typing import Any

import psycopg2

from airflow_metric_gate.store.base import MetricStore
from airflow_metric_gate.store.pg_client import (
    _LOCK_NOT_AVAILABLE,
    _QUERY_CANCELED,
    REFUSED_AT_CONNECT,
    REFUSED_SQLSTATES,
    _BoundedCursor,
    _sqlstate,
    _Watchdog,
    driver_errors,
    outage_errors,
)
from airflow_metric_gate.store.points import PointRows
from airflow_metric_gate.store.rows import POINT_COLUMNS, RunRow
from airflow_metric_gate.store.schema import (
    DEFAULT_PARTITION,
    RUN_KEY_MONTH_SHIFT,
    month_partition,
    points_index_sql,
    run_key_month,
)
from airflow_metric_gate.store.urls import Timeouts, parse_postgres_url, scrub


def _copy_sql(table: str) -> str:
    """The ``COPY`` of ``metric_points`` rows into ``table`` (a name as ``regclass`` prints it)."""
    return f"COPY {table} ({', '.join(POINT_COLUMNS)}) FROM STDIN"


_ADVISORY_LOCK_KEY = 0x6D67617465  # "mgate"
log = logging.getLogger(__name__)

#: Milliseconds the making of a month's partition may wait for its locks (at most the store's lock timeout).
PARTITION_LOCK_MS = 2000


_NULL = "\\N"

def copy_payload(rows: PointRows | list[tuple]) -> str:
    """Return ``metric_points`` rows in ``COPY ... FROM STDIN`` text format (integers and floats only).

    :param rows: a chunk's rows as columns, or ``(run_key, coordinate, value, at_step)`` tuples.
    """
    if isinstance(rows, PointRows):
        return rows.copy_text()
    return "".join(
        [f"{run_key}\t{coordinate}\t{value!r}\t{_NULL if at_step is None else at_step}\n"
         for run_key, coordinate, value, at_step in rows])


class PostgresStore(MetricStore):
    """The metric store in PostgreSQL.

    Every transaction runs under ``statement_timeout`` (lock waits included), so a store that
    stops answering ends in :class:`StoreUnavailable` instead of a hang; new connections wait at
    most ``connect_timeout`` (set by whoever builds ``connect``: :meth:`from_url` does, and
    :class:`~airflow_metric_gate.hooks.metric_store.MetricStoreHook` for an Airflow connection).

    :param connect: returns a new DB-API connection (psycopg2, or psycopg 3).
    :param description: names the store in error messages (never includes a password).
    :param timeouts: the connection's timeouts (``connect`` is only quoted in messages here).
    :param secrets: strings never to show in a message (the password, in every form it was written).
    """

    dialect = "postgres"
    _lock_rows = " FOR UPDATE"
    _value_arrays = True
    reads_ahead = True  # DB-API threadsafety 2: a connection may be shared between threads
    _byte_collation = ' COLLATE "C"'
    _steps_digest_sql = "md5(string_agg(step::text, ',' ORDER BY coordinate))"
    outage_errors = outage_errors()
    driver_errors = driver_errors()

    def __init__(
        self,
        connect: Callable[[], Any],
        *,
        description: str = "",
        timeouts: Timeouts | None = None,
        secrets: Iterable[str] = (),
    ) -> None:
        super().__init__(connect, description=description)
        self.timeouts = timeouts or Timeouts()
        self.secrets = tuple(s for s in secrets if s)
        self._watchdog = _Watchdog()

    @classmethod
    def from_url(cls, url: str) -> PostgresStore:
        """Open a store from a ``postgresql://`` URL, checked first (nothing connects yet).

        :param url: ``postgresql://USER[:PASSWORD]@HOST[:PORT]/DB[?PARAMETER=VALUE&...]``; the
            parameters are those of :data:`~airflow_metric_gate.store.urls.POSTGRES_PARAMETERS`.
        :raises StoreInputError: the URL is malformed, or has an unknown parameter or a bad value.
        """
        target = parse_postgres_url(url)
        kwargs = target.connect_kwargs
        return cls(
            lambda: psycopg2.connect(**kwargs),
            description=target.shown,
            timeouts=target.timeouts,
            secrets=target.secrets,
        )

    @classmethod
    def from_hook(cls, hook: Any, *, timeouts: Timeouts | None = None, secrets: Iterable[str] = ()) -> PostgresStore:
        """Open a store on an Airflow ``PostgresHook`` (its connection is opened lazily).

        :param hook: a ``PostgresHook`` (or any DB-API hook with ``get_conn()``).
        :param timeouts: the statement timeout to apply (the hook's connection sets its own
            ``connect_timeout``).
        :param secrets: strings never to show in a message.
        """
        conn_id = getattr(hook, "postgres_conn_id", None) or getattr(hook, "conn_name_attr", "postgres")
        return cls(hook.get_conn, description=f"postgres connection {conn_id!r}", timeouts=timeouts, secrets=secrets)

    def _begin(self, cur: Any) -> None:
        t = self.timeouts
        cur.execute(
            "SELECT set_config('statement_timeout', %s, true), set_config('lock_timeout', %s, true), "
            "set_config('idle_in_transaction_session_timeout', %s, true)",
            (f"{t.statement_ms}ms", f"{t.lock_ms}ms", f"{t.idle_ms}ms"),
        )

    def _plan_indexed(self, cur: Any) -> None:
        cur.execute("SELECT set_config('enable_seqscan', 'off', true)")

    def _plan_bulk_join(self, cur: Any, on: bool = True) -> None:
        cur.execute("SELECT set_config('enable_nestloop', %s, true)", ("off" if on else "on",))

    def _plan_serial(self, cur: Any) -> None:
        cur.execute("SELECT set_config('max_parallel_workers_per_gather', '0', true)")

    def _cursor(self, conn: Any) -> Any:
        return _BoundedCursor(conn.cursor(), self)

    @contextmanager
    def _waiting(self) -> Iterator[None]:
        wait_ms = self.timeouts.client_wait_ms
        fileno = getattr(self._conn, "fileno", None)
        if not wait_ms or fileno is None:
            yield
            return
        self._watchdog.arm(fileno(), wait_ms / 1000)
        try:
            yield
        finally:
            self._watchdog.disarm()

    def _error_text(self, exc: BaseException) -> str:
        text = scrub(str(exc), self.secrets)
        if self._watchdog.fired:
            text += (
                f" (the client cut the connection: no answer within client_timeout={self.timeouts.client_wait_ms}ms; "
                "the server or the network stopped answering)"
            )
        elif "timeout expired" in text:
            text += (
                f" (connect_timeout={self.timeouts.connect}s: set connect_timeout in the store URL's query "
                "or the Airflow connection's extra)"
            )
        elif _sqlstate(exc) == _LOCK_NOT_AVAILABLE:
            text += (
                f" (lock_timeout={self.timeouts.lock_ms}ms: another writer of the same run, or a schema upgrade, "
                "held the lock longer; set lock_timeout in the store URL's query or the Airflow connection's extra)"
            )
        elif _sqlstate(exc) == _QUERY_CANCELED and "statement timeout" in text:
            text += (
                f" ({self.timeouts.describe_statement()}: a statement ran or waited for a lock longer; "
                "set statement_timeout in the store URL's query or the Airflow connection's extra)"
            )
        return text

    def _refusal(self, exc: BaseException) -> str | None:
        """The server refused the settings or the grants (database, role, password, permission): bad input.

        Only a server that cannot be reached, or stops answering, is an outage worth retrying.
        """
        if not isinstance(exc, self.driver_errors):
            return None
        code = _sqlstate(exc)
        meaning = REFUSED_SQLSTATES.get(code) if code else None
        if meaning is None and code is None and isinstance(exc, self.outage_errors):
            text = str(exc)
            if "FATAL" in text or "fe_sendauth" in text:
                meaning = next((m for needle, m in REFUSED_AT_CONNECT if needle in text), None)
        if meaning is None:
            return None
        return (
            f"{meaning}: {self._error_text(exc)}; fix the store URL or the Airflow connection (database, user, "
            "password) or the user's grants: retrying will not help"
        )

    def _cause(self, exc: BaseException) -> BaseException | None:
        shown = str(exc)
        if any(secret in shown for secret in self.secrets) or scrub(shown) != " ".join(shown.split()):
            return None
        return exc

    def _connection(self) -> Any:
        if self._conn is None:
            self._watchdog.fired = False
        conn = super()._connection()
        if getattr(conn, "autocommit", False):
            conn.autocommit = False
        return conn

    def _new_run_key(self, cur: Any, run: RunRow) -> tuple[str, tuple]:
        # The month of the logical date in the high bits (it picks the partition), a sequence number
        # in the low ones; a number another run of that month already has is skipped.
        base = run_key_month(run.logical_date) << RUN_KEY_MONTH_SHIFT
        while True:
            cur.execute("SELECT nextval('metric_gate_run_seq')")
            key = base | (int(cur.fetchone()[0]) & ((1 << RUN_KEY_MONTH_SHIFT) - 1))
            cur.execute("SELECT 1 FROM runs WHERE run_key = %s", (key,))
            if cur.fetchone() is None:
                return "%s", (key,)

    def _prepare_write(self, run: RunRow) -> None:
        name, low, high = month_partition(run_key_month(run.logical_date))
        with self._transaction() as cur:
            if self._is_partition(cur, name):
                return
        # A month's first night makes the month's partition: a table of its own, then attached.  It is
        # sent as one request that the server commits as it ends, so a client that goes silent meanwhile
        # holds no lock, and with a short lock timeout, so that readers queue behind it only briefly.
        # When it cannot be made (a role that does not own the tables, a lock not granted in time), the
        # night's values go to the default partition: the write never fails for want of a partition.
        lock_ms = min(self.timeouts.lock_ms or PARTITION_LOCK_MS, PARTITION_LOCK_MS)
        statement = (
            f"SET lock_timeout = '{lock_ms}ms'; SET statement_timeout = '{self.timeouts.statement_ms}ms'; "
            f'CREATE TABLE IF NOT EXISTS "{name}" (run_key INTEGER NOT NULL, coordinate INTEGER NOT NULL, '
            f"value DOUBLE PRECISION NOT NULL, at_step BIGINT, "
            f'CONSTRAINT "{name}_months_keys" CHECK (run_key >= {low} AND run_key < {high})) '
            f"WITH (fillfactor = 100); {points_index_sql(name)}; "
            f'ALTER TABLE metric_points ATTACH PARTITION "{name}" FOR VALUES FROM ({low}) TO ({high}); '
            "RESET lock_timeout; RESET statement_timeout"
        )
        conn = self._connection()
        conn.autocommit = True
        cur = self._cursor(conn)
        failure: BaseException | None = None
        try:
            cur.execute(statement)
        except BaseException as exc:
            if not isinstance(exc, self.driver_errors) or isinstance(exc, self.outage_errors):
                self._raise_store_error(exc)
                raise
            failure = exc
        finally:
            try:
                cur.close()
                if self._conn is not None:
                    conn.autocommit = False
            except Exception:  # noqa: S110 - the connection is gone; the next transaction reconnects
                pass
        if failure is not None:
            with self._transaction() as check:
                if self._is_partition(check, name):  # another client made it first
                    return
            log.warning("metric store (%s): no partition %s for the night of %s (its values go to %s): %s",
                        self.description, name, run.logical_date.date(), DEFAULT_PARTITION,
                        self._error_text(failure))

    @staticmethod
    def _is_partition(cur: Any, name: str) -> bool:
        """Whether ``name`` is a partition of ``metric_points`` (read under the statement's snapshot)."""
        cur.execute(
            "SELECT EXISTS (SELECT 1 FROM pg_catalog.pg_inherits i JOIN pg_catalog.pg_class c ON c.oid = i.inhrelid "
            "WHERE i.inhparent = 'metric_points'::regclass AND c.relname = %s)", (name,))
        return bool(cur.fetchone()[0])

    def _whole_months(self, cur: Any, run_keys: list[int]) -> set[int]:
        by_month: dict[int, set[int]] = {}
        for key in run_keys:
            by_month.setdefault(key >> RUN_KEY_MONTH_SHIFT, set()).add(key)
        whole: set[int] = set()
        for month, keys in sorted(by_month.items()):
            name, low, high = month_partition(month)
            if not self._is_partition(cur, name):
                continue
            cur.execute("SELECT COUNT(*) FROM runs WHERE run_key >= %s AND run_key < %s", (low, high))
            if int(cur.fetchone()[0]) == len(keys):
                whole |= keys
        return whole

    def _drop_months(self, cur: Any, run_keys: set[int], *, dry_run: bool) -> tuple[set[int], list[str], int]:
        if not run_keys:
            return set(), [], 0
        if not dry_run:
            # The whole table, before any partition (the order every reader and writer takes them), and
            # only now, once the other nights' rows are deleted: no writer adds to a month while it is
            # weighed again and dropped, and the lock is held for the drops alone.
            cur.execute("LOCK TABLE metric_points IN ACCESS EXCLUSIVE MODE")
        gone: set[int] = set()
        dropped: list[str] = []
        values = 0
        for month in sorted({key >> RUN_KEY_MONTH_SHIFT for key in run_keys}):
            name, low, high = month_partition(month)
            keys = {key for key in run_keys if key >> RUN_KEY_MONTH_SHIFT == month}
            if not dry_run:  # this transaction deleted the month's runs: any left came meanwhile
                cur.execute("SELECT COUNT(*) FROM runs WHERE run_key >= %s AND run_key < %s", (low, high))
                if int(cur.fetchone()[0]):
                    continue
            cur.execute(f'SELECT COUNT(*) FROM "{name}"')
            values += int(cur.fetchone()[0])
            if not dry_run:
                cur.execute(f'DROP TABLE "{name}"')
            gone |= keys
            dropped.append(name)
        return gone, dropped, values

    def _insert_coordinates(self, cur: Any, declaration: int, steps: list[int]) -> None:
        cur.execute(
            "INSERT INTO coordinates (declaration, step) SELECT %s, s FROM unnest(%s::bigint[]) WITH ORDINALITY "
            "AS u(s, o) ORDER BY o ON CONFLICT DO NOTHING", (declaration, steps))

    def _lock_schema(self, cur: Any) -> None:
        cur.execute("SELECT pg_advisory_xact_lock(%s)", (_ADVISORY_LOCK_KEY,))

    def _table_exists(self, cur: Any, name: str) -> bool:
        return self._relation_exists(cur, name)

    @staticmethod
    def _relation_exists(cur: Any, name: str) -> bool:
        # Read pg_class under the statement's snapshot, not through ``to_regclass``: the server's cache of
        # names keeps this transaction's earlier "no such table" even after another client's upgrade, which
        # this one waited for, committed the table.
        cur.execute(
            "SELECT EXISTS (SELECT 1 FROM pg_catalog.pg_class c JOIN pg_catalog.pg_namespace n "
            "ON n.oid = c.relnamespace WHERE c.relname = %s AND n.nspname = ANY (current_schemas(false)))", (name,))
        return bool(cur.fetchone()[0])

    def _copy_statement(self, cur: Any, run_key: int) -> str:
        """The ``COPY`` of a run's rows: into its month's partition, in the binary format."""
        return _copy_sql(self._points_table(cur, run_key)) + " (FORMAT binary)"

    def _bulk_insert_values(self, cur: Any, rows: PointRows) -> None:
        # binary: the rows are built as arrays, and the server parses no text
        sql = self._copy_statement(cur, rows.run_key)
        data = rows.copy_binary()
        if hasattr(cur, "copy_expert"):  # psycopg2
            cur.copy_expert(sql, io.BytesIO(data))
        else:  # psycopg 3
            with self._waiting(), cur.copy(sql) as copy:
                copy.write(data)

    def _blocks_aggregate(self) -> str:
        # The statement orders each run's blocks as the values are read.
        return ("(SELECT json_agg(json_build_array(b.metric_key, b.steps_key, b.constraint_key, b.n) "
                f"ORDER BY {self._key_order('b')})::text ")

    @staticmethod
    def _points_table(cur: Any, run_key: int) -> str:
        """Return the table a run's points are copied into: its month's partition, else ``metric_points``.

        Copied straight into the partition, the rows skip the routing of each one (the partition's
        own constraints still hold them to its months).  The write has locked ``metric_points``
        already (it deleted the run's old points), so the partition is neither detached nor dropped
        meanwhile; a partition this role may not insert into is left to the routing.
        """
        name = month_partition(run_key >> RUN_KEY_MONTH_SHIFT)[0]
        cur.execute(
            "SELECT c.oid::regclass::text FROM pg_catalog.pg_inherits i JOIN pg_catalog.pg_class c "
            "ON c.oid = i.inhrelid WHERE i.inhparent = 'metric_points'::regclass AND c.relname = %s "
            "AND has_table_privilege(c.oid, 'INSERT')", (name,))
        found = cur.fetchone()
        return str(found[0]) if found else "metric_points"
