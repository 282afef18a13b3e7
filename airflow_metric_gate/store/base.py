"""The metric store over a DB-API connection (SPEC section 7).

One class serves both dialects; the SQL is written once with ``%s`` placeholders and adapted for
SQLite, and the two places where the dialects differ (bulk load and connection setup) are methods
the dialect subclasses override.

Every write is one transaction: a run and all its values, or nothing.  A run's rows are keyed on
its store run id, so writing the same run again replaces its rows instead of adding duplicates.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Iterable, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

from airflow_metric_gate.store.schema import SCHEMA_VERSION, SCHEMA_VERSION_TABLE, migration_statements

ROLES = ("baseline", "shadow")
STATUSES = ("pending", "trusted", "untrusted")

#: Provenance keys that have their own ``runs`` column; any other key goes to ``runs.provenance``.
PROVENANCE_COLUMNS = ("dag_id", "airflow_run_id", "try_number", "map_index", "commit_sha", "training_job_id")

VALUE_COLUMNS = ("run_id", "metric_key", "steps_key", "constraint_key", "step", "value", "at_step", "ordinal")


class StoreError(Exception):
    """A store operation failed."""


class StoreUnavailable(StoreError):
    """The store could not be reached or was busy; retrying later may succeed."""


class StoreInputError(StoreError, ValueError):
    """The data handed to the store is invalid; retrying will not help."""


@dataclass
class RunRow:
    """What the store keeps about one gated run (the ``runs`` row, minus its values)."""

    run_id: str
    series: str
    backend: str
    suite: str
    role: str
    status: str
    logical_date: datetime
    provenance: dict = field(default_factory=dict)
    declarations: list = field(default_factory=list)
    selection_errors: list = field(default_factory=list)
    status_reason: str | None = None
    rebaseline: bool = False


@dataclass(frozen=True)
class ValueRow:
    """One ``metric_values`` row of a run: a coordinate and its value."""

    ordinal: int
    metric_key: str
    steps_key: str
    constraint_key: str
    step: int
    value: float
    at_step: int | None


@dataclass(frozen=True)
class MarkedRun:
    """A run matched by a mark: as it was before, and what it is now."""

    run: RunRow
    status: str
    reason: str | None

    @property
    def changed(self) -> bool:
        """Whether the run's status changed."""
        return self.run.status != self.status


def utc(dt: datetime) -> datetime:
    """Return ``dt`` as an aware UTC datetime (naive datetimes are taken as UTC)."""
    if dt.tzinfo is None:
        return dt.replace(tzinfo=timezone.utc)
    return dt.astimezone(timezone.utc)


#: The baseline runs of a run: the most recent trusted baseline runs of its series identity with an
#: earlier logical date, not before the latest rebaseline marker (at most ``history_limit``).
BASELINE_RUNS_SQL = """
WITH cur AS (
    SELECT series, backend, suite, logical_date FROM runs WHERE run_id = %s
),
fence AS (
    SELECT MAX(r.logical_date) AS since
    FROM runs r JOIN cur ON r.series = cur.series AND r.backend = cur.backend AND r.suite = cur.suite
    WHERE r.rebaseline = TRUE AND r.logical_date <= cur.logical_date
)
SELECT r.run_id
FROM runs r JOIN cur ON r.series = cur.series AND r.backend = cur.backend AND r.suite = cur.suite
CROSS JOIN fence
WHERE r.role = 'baseline' AND r.status = 'trusted'
  AND r.logical_date < cur.logical_date AND r.run_id <> %s
  AND (fence.since IS NULL OR r.logical_date >= fence.since)
ORDER BY r.logical_date DESC, r.run_id DESC
LIMIT %s
"""

#: The baselines of every coordinate of a run in one statement.  Each baseline run's rows are read
#: by their own branch, through the (run_id, coordinate) index, so the cost follows the number of
#: baseline runs and coordinates, never the length of the stored history.
_BASELINE_SQL = """
SELECT c.ordinal, {select}
FROM metric_values c
JOIN ({runs}) h
  ON h.metric_key = c.metric_key AND h.steps_key = c.steps_key
 AND h.constraint_key = c.constraint_key AND h.step = c.step
WHERE c.run_id = %s
{group}"""
_BASELINE_RUN_BRANCH = "SELECT metric_key, steps_key, constraint_key, step, value FROM metric_values WHERE run_id = %s"


def baseline_sql(baseline_runs: int, *, sums: bool) -> str:
    """Return the statement reading the baselines of a run from ``baseline_runs`` baseline runs.

    Parameters: the baseline run ids, then the run id.

    :param baseline_runs: how many baseline run ids are bound.
    :param sums: ``COUNT`` and ``SUM`` per coordinate (for a mean) instead of every value.
    """
    runs = "\n    UNION ALL ".join([_BASELINE_RUN_BRANCH] * baseline_runs)
    if sums:
        return _BASELINE_SQL.format(select="COUNT(h.value), SUM(h.value)", runs=runs, group="GROUP BY c.ordinal\n")
    return _BASELINE_SQL.format(select="h.value", runs=runs, group="")


_RUN_COLUMNS = (
    "run_id, series, backend, suite, role, status, logical_date, provenance, declarations, "
    "selection_errors, status_reason, rebaseline"
)


class MetricStore:
    """The metric store: runs, their values, and the baselines read from them.

    :param connect: returns a new DB-API connection; called once, lazily.
    """

    dialect = "generic"
    #: Exceptions of the driver that mean the store is down or busy (retryable).
    outage_errors: tuple[type[BaseException], ...] = ()
    #: Base class of the driver's errors.
    driver_errors: tuple[type[BaseException], ...] = ()

    def __init__(self, connect: Callable[[], Any], *, description: str = "") -> None:
        self._connect = connect
        self._conn: Any = None
        self._schema_ready = False
        self.description = description or self.dialect

    # -- connection and transactions ---------------------------------------------------------

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

    def _connection(self) -> Any:
        if self._conn is None:
            try:
                self._conn = self._connect()
            except self.outage_errors as exc:
                raise StoreUnavailable(f"cannot connect to the metric store ({self.description}): {exc}") from exc
        return self._conn

    def close(self) -> None:
        """Close the connection, if one was opened."""
        if self._conn is not None:
            try:
                self._conn.close()
            finally:
                self._conn = None

    def __enter__(self) -> MetricStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @contextmanager
    def _transaction(self, *, schema: bool = True):
        if schema and not self._schema_ready:
            self.upgrade()
        conn = self._connection()
        cur = conn.cursor()
        try:
            self._begin(cur)
            yield cur
            conn.commit()
        except BaseException as exc:
            try:
                conn.rollback()
            except Exception:  # noqa: S110 - the original error is the one worth raising
                pass
            if isinstance(exc, self.outage_errors):
                self.close()
                raise StoreUnavailable(f"metric store ({self.description}) unavailable: {exc}") from exc
            if isinstance(exc, self.driver_errors):
                raise StoreError(f"metric store ({self.description}) error: {exc}") from exc
            raise
        finally:
            try:
                cur.close()
            except Exception:  # noqa: S110
                pass

    def _execute(self, cur: Any, sql: str, params: Sequence[Any] = ()) -> None:
        cur.execute(self._sql(sql), tuple(params))

    # -- schema --------------------------------------------------------------------------------

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

    def upgrade(self) -> tuple[int, int]:
        """Create or upgrade the schema to the version this package knows.

        :return: ``(version before, version after)``.
        """
        with self._transaction(schema=False) as cur:
            self._lock_schema(cur)
            before = self._read_version(cur)
            if before > SCHEMA_VERSION:
                raise StoreError(
                    f"metric store ({self.description}) is at schema version {before}, newer than this "
                    f"package's {SCHEMA_VERSION}; upgrade airflow-metric-gate"
                )
            now = self._ts(datetime.now(timezone.utc))
            for version in range(before + 1, SCHEMA_VERSION + 1):
                for statement in migration_statements(version, self.dialect):
                    self._execute(cur, statement)
                self._execute(
                    cur, f"INSERT INTO {SCHEMA_VERSION_TABLE} (version, upgraded_at) VALUES (%s, %s)", (version, now)
                )
        self._schema_ready = True
        return before, SCHEMA_VERSION

    # -- writes --------------------------------------------------------------------------------

    def _bulk_insert_values(self, cur: Any, rows: list[tuple]) -> None:
        placeholders = ", ".join(["%s"] * len(VALUE_COLUMNS))
        cur.executemany(
            self._sql(f"INSERT INTO metric_values ({', '.join(VALUE_COLUMNS)}) VALUES ({placeholders})"), rows
        )

    def write_run(self, run: RunRow, values: Sequence[ValueRow]) -> int:
        """Write a run and all its values atomically, replacing whatever that run id held.

        Non-finite values are refused before any statement runs.  A run id belongs to one series
        identity (series, backend, suite): writing another identity under it is refused, and the
        stored run is left as it was.

        :param run: the run row (its status is written as given, normally ``pending``).
        :param values: the run's coordinates and values.
        :return: the number of ``metric_values`` rows written.
        :raises StoreInputError: on a non-finite value, unknown role or status, or a run id that
            belongs to another series identity.
        """
        if run.role not in ROLES:
            raise StoreInputError(f"role must be one of {', '.join(ROLES)}, got {run.role!r}")
        if run.status not in STATUSES:
            raise StoreInputError(f"status must be one of {', '.join(STATUSES)}, got {run.status!r}")
        rows = []
        for v in values:
            value = float(v.value)
            if not math.isfinite(value):
                raise StoreInputError(
                    f"refusing to store non-finite value {value!r} for {v.metric_key} step {v.step}; "
                    "nothing was written"
                )
            rows.append((run.run_id, v.metric_key, v.steps_key, v.constraint_key, v.step, value, v.at_step, v.ordinal))
        prov = dict(run.provenance)
        columns = {key: prov.get(key) for key in PROVENANCE_COLUMNS}
        now = self._ts(datetime.now(timezone.utc))
        params = (
            run.run_id, run.series, run.backend, run.suite, run.role, run.status, self._ts(run.logical_date),
            now, now, *columns.values(), json.dumps(prov, sort_keys=True, default=str),
            json.dumps(run.declarations), json.dumps(run.selection_errors), run.status_reason,
            self._bool(run.rebaseline),
        )
        names = (
            "run_id, series, backend, suite, role, status, logical_date, created_at, updated_at, "
            + ", ".join(PROVENANCE_COLUMNS)
            + ", provenance, declarations, selection_errors, status_reason, rebaseline"
        )
        updates = ", ".join(
            f"{c} = excluded.{c}"
            for c in (
                "series", "backend", "suite", "role", "status", "logical_date", "updated_at", *PROVENANCE_COLUMNS,
                "provenance", "declarations", "selection_errors", "status_reason", "rebaseline",
            )
        )
        # A run id names the run of one series identity: a write for another identity changes nothing.
        upsert = (
            f"INSERT INTO runs ({names}) VALUES ({', '.join(['%s'] * len(params))}) "
            f"ON CONFLICT (run_id) DO UPDATE SET {updates} "
            "WHERE runs.series = excluded.series AND runs.backend = excluded.backend AND runs.suite = excluded.suite"
        )
        with self._transaction() as cur:
            self._execute(cur, upsert, params)
            if cur.rowcount == 0:
                self._execute(cur, "SELECT series, backend, suite FROM runs WHERE run_id = %s", (run.run_id,))
                series, backend, suite = cur.fetchone()
                raise StoreInputError(
                    f"store run id {run.run_id!r} already belongs to series {series!r} (backend {backend!r}, "
                    f"suite {suite!r}); refusing to store series {run.series!r} (backend {run.backend!r}, "
                    f"suite {run.suite!r}) under it: give this run an id of its own; nothing was stored"
                )
            self._execute(cur, "DELETE FROM metric_values WHERE run_id = %s", (run.run_id,))
            if rows:
                self._bulk_insert_values(cur, rows)
        return len(rows)

    def set_status(self, run_id: str, status: str, reason: str | None = None) -> None:
        """Set a run's status after evaluation.

        :param run_id: the store run id.
        :param status: ``pending``, ``trusted`` or ``untrusted``.
        :param reason: a short note kept in ``runs.status_reason``.
        """
        if status not in STATUSES:
            raise StoreInputError(f"status must be one of {', '.join(STATUSES)}, got {status!r}")
        with self._transaction() as cur:
            self._execute(
                cur,
                "UPDATE runs SET status = %s, status_reason = %s, updated_at = %s WHERE run_id = %s",
                (status, reason, self._ts(datetime.now(timezone.utc)), run_id),
            )

    _MARK_BY = {"run_id": "run_id", "airflow_run_id": "airflow_run_id", "commit": "commit_sha"}
    #: Appended to the SELECT that picks the runs to mark, so they stay as read until marked.
    _lock_rows = ""

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
        where = [f"{column} = %s"]
        params: list[Any] = [key]
        for name, value in (("dag_id", dag_id), ("series", series), ("backend", backend), ("suite", suite)):
            if value is not None:
                where.append(f"{name} = %s")
                params.append(value)
        return " AND ".join(where), params

    def mark_runs(
        self,
        status: str,
        *,
        by: str,
        key: str,
        reason: str | None = None,
        dag_id: str | None = None,
        series: str | None = None,
        backend: str | None = None,
        suite: str | None = None,
    ) -> list[MarkedRun]:
        """Mark runs trusted or untrusted by store run id, Airflow run id or commit sha; say what changed.

        Idempotent: a run already in that status keeps it.  A ``reason`` is always recorded, also on
        a run whose status does not change; without one, a run that changes status gets
        ``marked <status> by hand`` and a run that does not is left untouched.

        :param status: ``trusted`` or ``untrusted``.
        :param by: ``run_id``, ``airflow_run_id`` (needs ``dag_id``: Airflow run ids repeat across
            DAGs) or ``commit``.
        :param key: the value to match.
        :param reason: a note kept in ``runs.status_reason``.
        :param dag_id: only runs of this DAG.
        :param series: only runs of this series.
        :param backend: only runs of this backend.
        :param suite: only runs of this suite.
        :return: every matching run, as it was, with its new status; empty when nothing matched.
        :raises StoreInputError: on an unknown status or ``by``, or an Airflow run id without ``dag_id``.
        """
        if status not in ("trusted", "untrusted"):
            raise StoreInputError(f"can only mark runs trusted or untrusted, not {status!r}")
        where, params = self._match(by, key, dag_id, series, backend, suite)
        marked: list[MarkedRun] = []
        with self._transaction() as cur:
            self._execute(
                cur, f"SELECT {_RUN_COLUMNS} FROM runs WHERE {where} ORDER BY logical_date, run_id{self._lock_rows}",
                params,
            )
            now = self._ts(datetime.now(timezone.utc))
            for run in [self._run_from_row(r) for r in cur.fetchall()]:
                changed = run.status != status
                note = reason if reason is not None else (f"marked {status} by hand" if changed else None)
                if changed or (note is not None and note != run.status_reason):
                    self._execute(
                        cur,
                        "UPDATE runs SET status = %s, status_reason = %s, updated_at = %s WHERE run_id = %s",
                        (status, note, now, run.run_id),
                    )
                marked.append(MarkedRun(run, status, note if note is not None else run.status_reason))
        return marked

    def mark(self, status: str, *, by: str, key: str, reason: str | None = None, **scope: str | None) -> int:
        """Mark runs trusted or untrusted (see :meth:`mark_runs`); return how many changed status.

        :param status: ``trusted`` or ``untrusted``.
        :param by: ``run_id``, ``airflow_run_id`` or ``commit``.
        :param key: the value to match.
        :param reason: a note kept in ``runs.status_reason``.
        :param scope: ``dag_id``, ``series``, ``backend``, ``suite`` (see :meth:`mark_runs`).
        :return: how many runs changed status.
        """
        return sum(m.changed for m in self.mark_runs(status, by=by, key=key, reason=reason, **scope))

    def mark_rebaseline(self, run_id: str, on: bool = True) -> int:
        """Start (or stop) a fresh baseline at a run: later runs of its series ignore older history.

        :param run_id: the store run id.
        :param on: ``False`` removes the marker.
        :return: how many runs changed.
        """
        with self._transaction() as cur:
            self._execute(
                cur,
                "UPDATE runs SET rebaseline = %s, updated_at = %s WHERE run_id = %s AND rebaseline <> %s",
                (self._bool(on), self._ts(datetime.now(timezone.utc)), run_id, self._bool(on)),
            )
            return cur.rowcount

    # -- reads ---------------------------------------------------------------------------------

    def _run_from_row(self, row: Sequence[Any]) -> RunRow:
        return RunRow(
            run_id=row[0], series=row[1], backend=row[2], suite=row[3], role=row[4], status=row[5],
            logical_date=self._from_ts(row[6]), provenance=json.loads(row[7] or "{}"),
            declarations=json.loads(row[8] or "[]"), selection_errors=json.loads(row[9] or "[]"),
            status_reason=row[10], rebaseline=bool(row[11]),
        )

    def get_run(self, run_id: str) -> RunRow | None:
        """Return a run's row, or ``None`` if the store has no such run.

        :param run_id: the store run id.
        """
        with self._transaction() as cur:
            self._execute(cur, f"SELECT {_RUN_COLUMNS} FROM runs WHERE run_id = %s", (run_id,))
            row = cur.fetchone()
        return None if row is None else self._run_from_row(row)

    def find_runs(
        self,
        *,
        by: str,
        key: str,
        dag_id: str | None = None,
        series: str | None = None,
        backend: str | None = None,
        suite: str | None = None,
    ) -> list[RunRow]:
        """Return the runs whose store run id, Airflow run id or commit sha is ``key``.

        :param by: ``run_id``, ``airflow_run_id`` (needs ``dag_id``) or ``commit``.
        :param key: the value to match.
        :param dag_id: only runs of this DAG.
        :param series: only runs of this series.
        :param backend: only runs of this backend.
        :param suite: only runs of this suite.
        """
        where, params = self._match(by, key, dag_id, series, backend, suite)
        with self._transaction() as cur:
            self._execute(cur, f"SELECT {_RUN_COLUMNS} FROM runs WHERE {where} ORDER BY logical_date, run_id", params)
            return [self._run_from_row(r) for r in cur.fetchall()]

    def list_runs(
        self, *, series: str | None = None, backend: str | None = None, suite: str | None = None, limit: int = 50
    ) -> list[RunRow]:
        """Return runs, newest logical date first.

        :param series: only this series.
        :param backend: only this backend.
        :param suite: only this suite.
        :param limit: at most this many runs.
        """
        sql = f"SELECT {_RUN_COLUMNS} FROM runs"
        params: list[Any] = []
        where = [(column, value) for column, value in (("series", series), ("backend", backend), ("suite", suite))
                 if value is not None]
        if where:
            sql += " WHERE " + " AND ".join(f"{column} = %s" for column, _ in where)
            params.extend(value for _, value in where)
        sql += " ORDER BY logical_date DESC, run_id DESC LIMIT %s"
        params.append(limit)
        with self._transaction() as cur:
            self._execute(cur, sql, params)
            return [self._run_from_row(r) for r in cur.fetchall()]

    def run_values_and_baselines(
        self, run_id: str, history_limit: int, *, sums: bool = False
    ) -> tuple[list[ValueRow], dict[int, Any]]:
        """Read a run's values and, in one set-based statement, the baselines of all its coordinates.

        The baseline of a coordinate is its values in the ``history_limit`` most recent runs of the
        same series identity that are ``baseline`` and ``trusted``, have an earlier logical date, are
        not the run itself, and do not precede the latest rebaseline marker.

        :param run_id: the store run id.
        :param history_limit: how many baseline runs to read.
        :param sums: return ``(count, sum)`` of the baseline values per ordinal, summed by the
            database (what a mean needs; far less to transfer), instead of the values themselves.
        :return: the run's values in ordinal order, and baselines by ordinal.
        """
        with self._transaction() as cur:
            self._execute(
                cur,
                "SELECT ordinal, metric_key, steps_key, constraint_key, step, value, at_step "
                "FROM metric_values WHERE run_id = %s ORDER BY ordinal",
                (run_id,),
            )
            current = [ValueRow(*row) for row in cur.fetchall()]
            history: dict[int, Any] = {}
            base: list[str] = []
            if current and history_limit > 0:
                self._execute(cur, BASELINE_RUNS_SQL, (run_id, run_id, history_limit))
                base = [row[0] for row in cur.fetchall()]
            if base:
                self._execute(cur, baseline_sql(len(base), sums=sums), (*base, run_id))
                if sums:
                    history = {ordinal: (int(n), float(total)) for ordinal, n, total in cur.fetchall()}
                else:
                    for ordinal, value in cur.fetchall():
                        history.setdefault(ordinal, []).append(value)
        return current, history

    def history(
        self,
        metric_key: str,
        *,
        series: str,
        backend: str | None = None,
        suite: str | None = None,
        step: int | None = None,
        limit: int = 50,
    ) -> list[dict]:
        """Return the stored values of a metric for one series, newest first.

        :param metric_key: the metric.
        :param series: the series name.
        :param backend: restrict to one backend.
        :param suite: restrict to one suite.
        :param step: restrict to one stored step.
        :param limit: at most this many rows.
        """
        sql = (
            "SELECT r.run_id, r.logical_date, r.backend, r.suite, r.role, r.status, "
            "v.steps_key, v.constraint_key, v.step, v.at_step, v.value "
            "FROM metric_values v JOIN runs r ON r.run_id = v.run_id "
            "WHERE v.metric_key = %s AND r.series = %s"
        )
        params: list[Any] = [metric_key, series]
        for column, value in (("r.backend", backend), ("r.suite", suite), ("v.step", step)):
            if value is not None:
                sql += f" AND {column} = %s"
                params.append(value)
        sql += " ORDER BY r.logical_date DESC, r.run_id DESC, v.ordinal LIMIT %s"
        params.append(limit)
        keys = (
            "run_id", "logical_date", "backend", "suite", "role", "status",
            "steps_key", "constraint_key", "step", "at_step", "value",
        )
        with self._transaction() as cur:
            self._execute(cur, sql, params)
            rows = [dict(zip(keys, row)) for row in cur.fetchall()]
        for row in rows:
            row["logical_date"] = self._from_ts(row["logical_date"]).isoformat()
        return rows

    def count(self, table: str, run_id: str | None = None) -> int:
        """Return the row count of ``runs`` or ``metric_values`` (optionally of one run).

        :param table: ``runs`` or ``metric_values``.
        :param run_id: count only this run's rows.
        """
        if table not in ("runs", "metric_values"):
            raise StoreInputError(f"unknown table {table!r}")
        sql = f"SELECT COUNT(*) FROM {table}"
        params: tuple = ()
        if run_id is not None:
            sql += " WHERE run_id = %s"
            params = (run_id,)
        with self._transaction() as cur:
            self._execute(cur, sql, params)
            return int(cur.fetchone()[0])


def value_rows(items: Iterable[tuple[int, str, str, str, int, float, int | None]]) -> list[ValueRow]:
    """Build :class:`ValueRow` objects from plain tuples (ordinal first)."""
    return [ValueRow(*item) for item in items]
