"""The store's connection, transactions, errors and schema: what every part of the store stands on.

A dialect (:mod:`~airflow_metric_gate.store.sqlite`, :mod:`~airflow_metric_gate.store.postgres`) overrides
the hooks and class attributes here where the two databases differ.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from datetime import datetime, timezone
from typing import Any, TypeVar

from airflow_metric_gate.dates import utc
from airflow_metric_gate.store.errors import StoreFailure, StoreInputError, StoreUnavailable
from airflow_metric_gate.store.points import Ordinals
from airflow_metric_gate.store.rows import RunRow
from airflow_metric_gate.store.schema import SCHEMA_VERSION, SCHEMA_VERSION_TABLE, migration_statements
from airflow_metric_gate.store.sql import equal_to

_Store = TypeVar("_Store", bound="StoreCore")

#: Keys bound per statement when looking declarations or runs up.
_KEY_BATCH = 200


class StoreCore:
    """A DB-API connection opened lazily, its transactions, the store's errors, and the schema version.

    :param connect: returns a new DB-API connection; called once, lazily.
    :param description: names the store in messages (a URL without its password).
    """

    dialect = "generic"
    #: Exceptions of the driver that mean the store is down or busy (retryable).
    outage_errors: tuple[type[BaseException], ...] = ()
    #: Base class of the driver's errors.
    driver_errors: tuple[type[BaseException], ...] = ()
    #: SQL of the digest of ``coordinates.step`` in coordinate order, as :func:`steps_digest`
    #: computes it (``None``: the dialect has none, coordinates are always read).
    _steps_digest_sql: str | None = None
    #: Opened for a caller that only reads: the schema is checked, never created or upgraded.
    read_only = False
    #: Parameters one statement may bind, with room to spare (dialects lower it).
    max_parameters = 16000
    #: Appended to a ``SELECT`` of ``runs`` rows that the transaction goes on to change (the runs
    #: to mark stay as read until marked).
    _lock_rows = ""
    #: The dialect aggregates a coordinate's history into one array per row (PostgreSQL).
    _value_arrays = False
    #: The connection may be used from a thread other than the one that opened it (while that one
    #: uses the store no more), so a caller can read the next piece while it works on the last one.
    reads_ahead = False
    #: Appended to a text key so that it sorts byte by byte (PostgreSQL's ``COLLATE "C"``).
    _byte_collation = ""
    #: What a mark may name runs by: the option, and the column of ``runs``.
    _MARK_BY = {"run_id": "run_id", "airflow_run_id": "airflow_run_id", "commit": "commit_sha"}

    def __init__(self, connect: Callable[[], Any], *, description: str = "") -> None:
        self._connect = connect
        self._conn: Any = None
        self._schema_ready = False
        self.description = description or self.dialect

    def _sql(self, sql: str) -> str:
        return sql

    def _ts(self, dt: datetime) -> Any:
        return utc(dt)

    def _from_ts(self, value: Any) -> datetime:
        return utc(value)

    def _bool(self, value: bool) -> Any:
        return value

    def _begin(self, cur: Any) -> None:
        """Open a transaction on ``cur``'s connection (drivers that begin implicitly do nothing)."""

    def _error_text(self, exc: BaseException) -> str:
        """Return a driver error as one line for a message (dialects hide secrets and add hints)."""
        return " ".join(str(exc).split())

    def _cause(self, exc: BaseException) -> BaseException | None:
        """Return the driver error to chain to a store error, or ``None`` when its text shows a secret."""
        return exc

    def _refusal(self, exc: BaseException) -> str | None:
        """Return why an error is the driver's refusal that no retry cures (a permission), else ``None``.

        Such an error is bad input (:class:`StoreInputError`), not an outage.  Dialects override;
        ``exc`` may be any exception.
        """
        return None

    def _connection(self) -> Any:
        if self._conn is None:
            try:
                self._conn = self._connect()
            except (*self.outage_errors, *self.driver_errors) as exc:
                refusal = self._refusal(exc)
                if refusal is not None:
                    raise StoreInputError(f"metric store ({self.description}): {refusal}") from self._cause(exc)
                if isinstance(exc, self.outage_errors):
                    raise StoreUnavailable(
                        f"cannot connect to the metric store ({self.description}): {self._error_text(exc)}"
                    ) from self._cause(exc)
                # the driver refused the settings themselves
                raise StoreInputError(
                    f"invalid connection settings of the metric store ({self.description}): {self._error_text(exc)}"
                ) from self._cause(exc)
        return self._conn

    def close(self) -> None:
        """Close the connection, if one was opened."""
        if self._conn is not None:
            try:
                self._conn.close()
            finally:
                self._conn = None

    def __enter__(self: _Store) -> _Store:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @contextmanager
    def _waiting(self) -> Iterator[None]:
        """Around every wait for the server's answer (dialects bound it on the client side)."""
        yield

    def _cursor(self, conn: Any) -> Any:
        """Return a cursor of ``conn`` (dialects wrap it)."""
        return conn.cursor()

    def _plan_indexed(self, cur: Any) -> None:
        """Make the rest of the transaction read ``metric_values`` through its indexes only (dialects override).

        The nightly pipeline never analyzes the tables right before it reads them: statistics taken
        when the store held a few nights say that a new night's run id has no rows, or that a run
        holds a third of the table, and the planner may then scan the whole table.
        """

    def _plan_serial(self, cur: Any) -> None:
        """For the rest of the transaction: no parallel workers (for many small aggregates, one per night).

        Starting workers costs more than the few thousand rows each branch reads.
        """

    def _plan_bulk_join(self, cur: Any, on: bool = True) -> None:
        """Around a statement that joins a run's coordinates with other runs' values: no nested loop.

        With stale statistics a nested loop, estimated over one row, runs once per value.

        :param on: ``False`` restores the planner's own choice.
        """

    @contextmanager
    def _transaction(self, *, schema: bool = True, indexed: bool = False):
        if schema and not self._schema_ready:
            if self.read_only:
                self._check_schema()
            else:
                self.upgrade()
        conn = self._connection()
        cur = self._cursor(conn)
        try:
            self._begin(cur)
            if indexed:
                self._plan_indexed(cur)
            yield cur
            with self._waiting():
                conn.commit()
        except BaseException as exc:
            try:
                conn.rollback()
            except Exception:  # noqa: S110 - the original error is the one worth raising
                pass
            self._raise_store_error(exc)
            raise
        finally:
            try:
                cur.close()
            except Exception:  # noqa: S110
                pass

    def _raise_store_error(self, exc: BaseException) -> None:
        """Raise a driver's error as the store error it is (a refusal, an outage, any other); else return."""
        refusal = self._refusal(exc)
        if refusal is not None:
            raise StoreInputError(f"metric store ({self.description}): {refusal}") from self._cause(exc)
        if isinstance(exc, self.outage_errors):
            self.close()
            raise StoreUnavailable(
                f"metric store ({self.description}) unavailable: {self._error_text(exc)}"
            ) from self._cause(exc)
        if isinstance(exc, self.driver_errors):
            raise StoreFailure(
                f"metric store ({self.description}) error: {self._error_text(exc)}"
            ) from self._cause(exc)

    def _execute(self, cur: Any, sql: str, params: Sequence[Any] = ()) -> None:
        cur.execute(self._sql(sql), tuple(params))

    def _lock_schema(self, cur: Any) -> None:
        """Serialise concurrent upgrades (dialects override)."""

    def schema_version(self) -> int:
        """Return the schema version the store is at (0 for an empty database)."""
        with self._transaction(schema=False) as cur:
            return self._read_version(cur)

    def _read_version(self, cur: Any) -> int:
        if not self._table_exists(cur, SCHEMA_VERSION_TABLE):
            return 0
        self._execute(cur, f"SELECT MAX(version) FROM {SCHEMA_VERSION_TABLE}")
        row = cur.fetchone()
        return int(row[0] or 0)

    def _table_exists(self, cur: Any, name: str) -> bool:
        raise NotImplementedError

    def _newer_schema(self, version: int) -> StoreFailure:
        return StoreFailure(
            f"metric store ({self.description}) is at schema version {version}, newer than this "
            f"package's {SCHEMA_VERSION}; upgrade airflow-metric-gate"
        )

    def _check_schema(self) -> None:
        """For a store opened read-only: its schema must be this package's, since nothing upgrades it.

        :raises StoreInputError: the store has no tables, or an older schema.
        :raises StoreFailure: the schema is newer than this package's.
        """
        version = self.schema_version()
        if version == 0:
            raise StoreInputError(
                f"metric store ({self.description}) has no metric-gate tables: it is no metric store, or an "
                "empty one (a command that only reads creates no tables; `metric-gate db upgrade` does)"
            )
        if version < SCHEMA_VERSION:
            raise StoreInputError(
                f"metric store ({self.description}) is at schema version {version}, older than this package's "
                f"{SCHEMA_VERSION}, and a command that only reads does not upgrade it: run "
                "`metric-gate db upgrade` with the same --store first"
            )
        if version > SCHEMA_VERSION:
            raise self._newer_schema(version)
        self._schema_ready = True

    def upgrade(self) -> tuple[int, int]:
        """Create or upgrade the schema to the version this package knows.

        :return: ``(version before, version after)``.
        """
        with self._transaction(schema=False) as cur:
            # A current schema (every run but the first after an upgrade of the package) takes no lock
            # at all: writers and readers of different series never wait for one another here.
            before = self._read_version(cur)
            if before > SCHEMA_VERSION:
                raise self._newer_schema(before)
            if before < SCHEMA_VERSION:
                self._lock_schema(cur)
                before = self._read_version(cur)  # another client may have upgraded while this one waited
            now = self._ts(datetime.now(timezone.utc))
            for version in range(before + 1, SCHEMA_VERSION + 1):
                for statement in migration_statements(version, self.dialect):
                    self._execute(cur, statement)
                self._execute(
                    cur, f"INSERT INTO {SCHEMA_VERSION_TABLE} (version, upgraded_at) VALUES (%s, %s)", (version, now)
                )
        self._schema_ready = True
        return before, SCHEMA_VERSION

    def _run_from_row(self, row: Sequence[Any]) -> RunRow:
        return RunRow(
            run_id=row[0], series=row[1], backend=row[2], suite=row[3], role=row[4], status=row[5],
            logical_date=self._from_ts(row[6]), provenance=json.loads(row[7] or "{}"),
            declarations=json.loads(row[8] or "[]"), selection_errors=json.loads(row[9] or "[]"),
            status_reason=row[10], rebaseline=bool(row[11]), outcomes=json.loads(row[12] or "{}"),
            write_version=int(row[13] or 0),
        )

    def _run_key(self, cur: Any, run_id: str) -> int | None:
        """Return the ``run_key`` of a run, or ``None`` if the store has no such run."""
        self._execute(cur, "SELECT run_key FROM runs WHERE run_id = %s", (run_id,))
        row = cur.fetchone()
        return None if row is None else int(row[0])

    def _ordinals(self, cur: Any, run_key: int | None, declaration: int | None = None) -> Ordinals:
        """Return the blocks of a run (of one declaration only, if given)."""
        if run_key is None:
            return Ordinals([])
        sql = "SELECT coordinate, ordinal, length, declaration FROM run_blocks WHERE run_key = %s"
        params: tuple = (run_key,)
        if declaration is not None:
            sql += " AND declaration = %s"
            params = (run_key, declaration)
        self._execute(cur, sql, params)
        return Ordinals(cur.fetchall())

    def _declaration_keys(self, cur: Any, ids: Iterable[int]) -> dict[int, tuple[str, str, str]]:
        """Return the ``(metric_key, steps_key, constraint_key)`` of declarations by id."""
        ids = sorted(set(ids))
        keys: dict[int, tuple[str, str, str]] = {}
        for start in range(0, len(ids), _KEY_BATCH):
            chunk = ids[start:start + _KEY_BATCH]
            self._execute(cur, "SELECT declaration, metric_key, steps_key, constraint_key FROM declarations "
                          f"WHERE declaration IN ({', '.join(['%s'] * len(chunk))})", chunk)
            keys.update({int(d): (m, st, c) for d, m, st, c in cur.fetchall()})
        return keys

    def _steps(self, cur: Any, ordinals: Ordinals) -> dict[int, int]:
        """Return the step of each coordinate of a run's declarations (one index range per declaration)."""
        steps: dict[int, int] = {}
        for declaration, (lo, hi) in ordinals.declarations().items():
            self._execute(cur, "SELECT coordinate, step FROM coordinates WHERE declaration = %s "
                          "AND coordinate BETWEEN %s AND %s", (declaration, lo, hi))
            steps.update(cur.fetchall())
        return steps

    def _declaration_ids(self, cur: Any, keys: Sequence[tuple[str, str, str]], *, add: bool) -> dict[tuple, int]:
        """Return the ``declarations`` id of each ``(metric_key, steps_key, constraint_key)``.

        :param keys: the declarations' keys.
        :param add: add the declarations the store does not have yet (else they are left out).
        """
        ids: dict[tuple, int] = {}
        for start in range(0, len(keys), _KEY_BATCH):
            chunk = list(keys[start:start + _KEY_BATCH])
            where = " OR ".join(["(metric_key = %s AND steps_key = %s AND constraint_key = %s)"] * len(chunk))
            for _ in range(2 if add else 1):
                self._execute(cur, f"SELECT declaration, metric_key, steps_key, constraint_key FROM declarations "
                              f"WHERE {where}", [k for key in chunk for k in key])
                ids.update({(m, s, c): int(d) for d, m, s, c in cur.fetchall()})
                missing = [key for key in chunk if key not in ids]
                if not missing or not add:
                    break
                cur.executemany(
                    self._sql("INSERT INTO declarations (metric_key, steps_key, constraint_key) VALUES (%s, %s, %s) "
                              "ON CONFLICT DO NOTHING"), missing)
        return ids

    def _match(
        self, by: str, key: str, dag_id: str | None, series: str | None, backend: str | None, suite: str | None
    ) -> tuple[str, list[Any]]:
        """Return the WHERE clause and parameters that pick the runs to mark or find."""
        column = self._MARK_BY.get(by)
        if column is None:
            raise StoreInputError(f"mark by one of {', '.join(self._MARK_BY)}, not {by!r}")
        if by == "airflow_run_id" and not dag_id:
            raise StoreInputError(
                "an Airflow run id is unique only inside one DAG (every DAG has its scheduled__<date> runs): "
                "give the dag_id too"
            )
        where, params = equal_to(((column, key), ("dag_id", dag_id), ("series", series), ("backend", backend),
                                  ("suite", suite)))
        return " AND ".join(where), params
