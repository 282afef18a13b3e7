"""The metric store over a DB-API connection (SPEC section 7).

One class serves both dialects; the SQL is written once with ``%s`` placeholders and adapted for
SQLite, and the two places where the dialects differ (bulk load and connection setup) are methods
the dialect subclasses override.

Every write is one transaction: a run and all its values, or nothing.  A run's rows are keyed on
its store run id, so writing the same run again replaces its rows instead of adding duplicates.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from datetime import datetime, timezone
from itertools import chain, islice, repeat
from operator import gt
from typing import Any

from airflow_metric_gate.chunking import batched, chunk_points
from airflow_metric_gate.dates import parse_datetime, utc
from airflow_metric_gate.enums import JUDGED_STATUSES, Role, RunStatus
from airflow_metric_gate.store.errors import RunRewritten, StoreFailure, StoreInputError, StoreUnavailable
from airflow_metric_gate.store.points import (
    AT_STEP_SQL,
    Block,
    Ordinals,
    PointGroup,
    PointRows,
    blocks_of,
    read_at_step,
)
from airflow_metric_gate.store.rows import (
    POINT_COLUMNS,
    PROVENANCE_COLUMNS,
    HistoryWindow,
    MarkedRun,
    RunRow,
    ValueRow,
    WindowRun,
    Written,
)
from airflow_metric_gate.store.schema import SCHEMA_VERSION, SCHEMA_VERSION_TABLE, migration_statements
from airflow_metric_gate.store.sql import (
    BASELINE_RUNS_SQL,
    CANDIDATE_RUNS_SQL,
    HISTORY_WINDOW_SQL,
    RUN_COLUMNS,
    baseline_params,
    baseline_sql,
    equal_to,
    in_ranges,
    run_values_sql,
)

_COUNTS_NOTE = re.compile(r"^\d+ (PASS|FAIL|INACTIVE|ERROR)(, \d+ (PASS|FAIL|INACTIVE|ERROR))*$")


def with_counts(status_reason: str | None, note: str) -> str:
    """Return a mark's note after the evaluation's counts kept in ``status_reason`` (``"9 PASS, 1 FAIL; <note>"``).

    :param status_reason: the run's ``status_reason`` before the mark.
    :param note: the mark's note.
    """
    evaluated = (status_reason or "").split(";", 1)[0].strip()
    return f"{evaluated}; {note}" if _COUNTS_NOTE.match(evaluated) else note

class MetricStore:
    """The metric store: runs, their values, and the baselines read from them.

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

    def __enter__(self) -> MetricStore:
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

    # -- writes --------------------------------------------------------------------------------

    def _bulk_insert_values(self, cur: Any, rows: PointRows) -> None:
        """Insert ``metric_points`` rows ``(run_key, coordinate, value, at_step)`` (dialects bulk-load)."""
        placeholders = ", ".join(["%s"] * len(POINT_COLUMNS))
        cur.executemany(
            self._sql(f"INSERT INTO metric_points ({', '.join(POINT_COLUMNS)}) VALUES ({placeholders})"), rows
        )

    def _new_run_key(self, cur: Any, run: RunRow) -> tuple[str, tuple]:
        """How a new ``runs`` row gets its ``run_key`` in the upsert: an SQL expression and its parameters.

        A run id written again keeps the key it has.  (SQLite: one more than the largest; PostgreSQL
        numbers it within the month of its logical date.)
        """
        return "(SELECT COALESCE(MAX(run_key), 0) + 1 FROM runs)", ()

    def _prepare_write(self, run: RunRow) -> None:
        """Before a run's write transaction: make what it will write into (PostgreSQL: its month's partition)."""

    def _whole_months(self, cur: Any, run_keys: list[int]) -> set[int]:
        """In prune's transaction, before it removes anything: the run keys of the months it empties.

        Those months' values go with their partition (:meth:`_drop_months`) instead of row by row.
        """
        return set()

    def _drop_months(self, cur: Any, run_keys: set[int], *, dry_run: bool) -> tuple[set[int], list[str], int]:
        """In prune's transaction, last: drop the partitions of the months :meth:`_whole_months` named.

        :return: the run keys whose values went with a partition, the partitions' names, and how
            many values they held.
        """
        return set(), [], 0

    def _insert_coordinates(self, cur: Any, declaration: int, steps: list[int]) -> None:
        """Add the coordinates of one declaration at these steps, numbered in the order given."""
        cur.executemany(
            self._sql("INSERT INTO coordinates (declaration, step) VALUES (%s, %s) ON CONFLICT DO NOTHING"),
            [(declaration, step) for step in steps],
        )

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

    def _coordinates_of(self, cur: Any, wanted: Sequence[tuple[int, Sequence[int]]]) -> list[Sequence[int]]:
        """Return the coordinates of the steps of each ``(declaration, steps)``, adding those the store lacks.

        A declaration whose steps the store holds already, numbered one after the other in the order
        given (every night after the first), is confirmed by one summary row per declaration
        (:meth:`_aligned_coordinates`) and comes back as a ``range``.  The others are read, a range of
        steps per declaration (so a chunk of a large declaration reads about as many coordinates as it
        has steps), in as few statements as :attr:`max_parameters` allows.

        :param wanted: ``(declaration id, steps in ordinal order)``; new coordinates are numbered in it.
        :return: the coordinates, parallel to each entry's steps.
        """
        aligned = self._aligned_coordinates(cur, wanted)
        out: list[Sequence[int]] = [
            range(aligned[i], aligned[i] + len(steps)) if i in aligned else () for i, (_, steps) in enumerate(wanted)]
        rest = [i for i in range(len(wanted)) if i not in aligned]
        if not rest:
            return out
        ranges: dict[int, tuple[int, int]] = {}
        for i in rest:
            declaration, steps = wanted[i]
            lo, hi = min(steps), max(steps)
            if declaration in ranges:
                lo, hi = min(lo, ranges[declaration][0]), max(hi, ranges[declaration][1])
            ranges[declaration] = (lo, hi)
        known = self._read_coordinates(cur, ranges)
        missing: dict[int, list[int]] = {}
        for i in rest:
            declaration, steps = wanted[i]
            have = known[declaration]
            seen = set(missing.get(declaration, ()))
            for step in steps:
                if step not in have and step not in seen:
                    seen.add(step)
                    missing.setdefault(declaration, []).append(step)
        if missing:
            for declaration, steps in missing.items():
                self._insert_coordinates(cur, declaration, steps)
            known.update(self._read_coordinates(cur, {d: ranges[d] for d in missing}))
        for i in rest:
            declaration, steps = wanted[i]
            out[i] = list(map(known[declaration].__getitem__, steps))
        return out

    def _aligned_coordinates(self, cur: Any, wanted: Sequence[tuple[int, Sequence[int]]]) -> dict[int, int]:
        """Return ``{position in wanted: first coordinate}`` of the entries the store holds aligned.

        An entry is aligned when the store's coordinates of its declaration between its lowest and
        highest step are exactly its steps, numbered one after the other in the order given: then
        the coordinate of its ``i``-th step is the first plus ``i``.  The store says so in one row
        per declaration, its count, lowest and highest coordinate and a digest of its steps in
        coordinate order (:attr:`_steps_digest_sql`; the dialect reads them with a lateral join);
        without such a digest nothing is aligned.
        """
        if self._steps_digest_sql is None:
            return {}
        declarations = [declaration for declaration, _ in wanted]
        entries = [i for i, d in enumerate(declarations) if declarations.count(d) == 1] \
            if len(set(declarations)) != len(declarations) else list(range(len(wanted)))
        aligned: dict[int, int] = {}
        most = max(1, min(_KEY_BATCH, self.max_parameters // 3))
        for start in range(0, len(entries), most):
            part = entries[start:start + most]
            by_declaration = {wanted[i][0]: i for i in part}
            params: list[int] = []
            for i in part:
                declaration, steps = wanted[i]
                params += (declaration, min(steps), max(steps))
            # one index range per declaration (an OR of ranges is planned as one scan of them all)
            self._execute(cur, "SELECT w.d, x.* FROM (VALUES " + ", ".join(["(%s, %s, %s)"] * len(part))
                          + ") AS w (d, lo, hi) CROSS JOIN LATERAL (SELECT COUNT(*), MIN(coordinate), "
                          f"MAX(coordinate), {self._steps_digest_sql} FROM coordinates "
                          "WHERE declaration = w.d AND step BETWEEN w.lo AND w.hi) AS x", params)
            for declaration, count, first, last, digest in cur.fetchall():
                if not count:
                    continue
                i = by_declaration[declaration]
                steps = wanted[i][1]
                n = len(steps)
                if count == n and last - first + 1 == n and digest == steps_digest(steps):
                    aligned[i] = int(first)
        return aligned

    def _read_coordinates(self, cur: Any, ranges: Mapping[int, tuple[int, int]]) -> dict[int, dict[int, int]]:
        """Return ``{declaration: {step: coordinate}}`` of the coordinates within each declaration's steps range."""
        known: dict[int, dict[int, int]] = {declaration: {} for declaration in ranges}
        items = list(ranges.items())
        most = max(1, min(_KEY_BATCH, self.max_parameters // 3))
        for start in range(0, len(items), most):
            part = items[start:start + most]
            where = " OR ".join(["(declaration = %s AND step BETWEEN %s AND %s)"] * len(part))
            self._execute(cur, f"SELECT declaration, step, coordinate FROM coordinates WHERE {where}",
                          [x for declaration, (lo, hi) in part for x in (declaration, lo, hi)])
            for declaration, step, coordinate in cur.fetchall():
                known[declaration][step] = coordinate
        return known

    def _points_of(self, cur: Any, run_key: int, groups: Sequence[PointGroup],
                   declarations: dict[tuple[str, str, str], int]) -> tuple[PointRows, list[Block]]:
        """Return one chunk's ``metric_points`` rows and blocks, numbering coordinates first seen.

        :param groups: the chunk's values, in ordinal order.
        :param declarations: the declaration ids known so far, by keys (added to).
        :return: the rows, sorted by coordinate, and the chunk's blocks in ordinal order.
        """
        new = list(dict.fromkeys(g.keys for g in groups if g.keys not in declarations))
        if new:
            declarations.update(self._declaration_ids(cur, new, add=True))
        ids = [declarations[g.keys] for g in groups]
        found = self._coordinates_of(cur, [(d, g.steps) for d, g in zip(ids, groups)])
        blocks: list[Block] = []
        coordinates: list[int] = []
        values: list[float] = []
        stored: list[int | None] | None = None
        for g, declaration, known in zip(groups, ids, found):
            n = len(known)
            if isinstance(known, range):  # as every night after the first: one block
                blocks.append((known.start, g.ordinal, n, declaration))
            else:
                blocks.extend(blocks_of(zip(range(g.ordinal, g.ordinal + n), known, repeat(declaration))))
            at = g.stored_at_steps()
            if at is not None and stored is None:
                stored = [None] * len(coordinates)
            if stored is not None:
                stored.extend([None] * n if at is None else at)
            coordinates.extend(known)
            values.extend(map(float, g.values))
        if any(map(gt, coordinates, islice(coordinates, 1, None))):
            order = sorted(range(len(coordinates)), key=coordinates.__getitem__)
            coordinates = [coordinates[i] for i in order]
            values = [values[i] for i in order]
            if stored is not None:
                stored = [stored[i] for i in order]
        return PointRows(run_key, coordinates, values, stored), blocks

    def _write_points(self, cur: Any, run_key: int, chunks: Iterable[Sequence[PointGroup]]) -> int:
        """Write a night's values chunk by chunk, then its blocks; return how many values.

        :param chunks: the values in ordinal order, a chunk at a time (read once).
        """
        declarations: dict[tuple[str, str, str], int] = {}
        blocks: list[Block] = []
        written = 0
        for groups in chunks:
            rows, found = self._points_of(cur, run_key, groups, declarations)
            del groups
            self._bulk_insert_values(cur, rows)
            written += len(rows)
            del rows
            if blocks and found:  # a block that the chunk boundary cut in two is one block
                c, o, n, d = blocks[-1]
                fc, fo, fn, fd = found[0]
                if d == fd and fo == o + n and fc == c + n:
                    blocks[-1] = (c, o, n + fn, d)
                    found = found[1:]
            blocks.extend(found)
        most = max(1, min(1000, self.max_parameters // 5))
        for start in range(0, len(blocks), most):
            part = blocks[start:start + most]
            self._execute(cur, "INSERT INTO run_blocks (run_key, coordinate, ordinal, length, declaration) VALUES "
                          + ", ".join(["(%s, %s, %s, %s, %s)"] * len(part)), [x for b in part for x in (run_key, *b)])
        return written

    def write_run(self, run: RunRow, values: Sequence[ValueRow]) -> int:
        """Write a run and all its values atomically (see :meth:`write_night`); return how many values.

        :param run: the run row (its status is written as given, normally ``pending``).
        :param values: the run's coordinates and values.
        :return: the number of ``metric_values`` rows written.
        """
        return self.write_night(run, values).rows

    def write_night(self, run: RunRow, values: Sequence[ValueRow] | Callable[[], Iterable[ValueRow]], *,
                    chunk: int | None = None) -> Written:
        """Write a run and all its values atomically, replacing whatever that run id held.

        Each write of a run id gets the next write version (``runs.write_version``: 1, then 2, ...),
        which a verdict names when it is kept (:meth:`set_status`): a verdict is kept only for the
        values it judged.

        Non-finite values are refused before any statement runs.  A run id belongs to one series
        identity (series, backend, suite): writing another identity under it is refused, and the
        stored run is left as it was.

        The values are built and sent in chunks of ``chunk`` values (see
        :mod:`~airflow_metric_gate.chunking`), all in the one transaction that writes the run.

        :param run: the run row (its status is written as given, normally ``pending``).
        :param values: the run's coordinates and values; or a function returning them anew on each
            call, in ordinal order (read twice: once to refuse non-finite values, once to write), so
            a night's values need never be held at once.
        :param chunk: values per chunk (default :func:`~airflow_metric_gate.chunking.chunk_points`).
        :return: how many ``metric_values`` rows were written, and the write version.
        :raises StoreInputError: on a non-finite value, unknown role or status, or a run id that
            belongs to another series identity.
        """
        chunk = chunk_points(chunk)
        if callable(values):
            produce = values
        else:
            ordinals = [v.ordinal for v in values]
            if any(a >= b for a, b in zip(ordinals, ordinals[1:])):
                values = sorted(values, key=lambda v: v.ordinal)
            del ordinals
            given = values

            def produce() -> Iterable[ValueRow]:
                return given

        def check() -> None:
            for v in produce():
                _refuse_non_finite(float(v.value), v.metric_key, v.step)

        def chunks() -> Iterator[list[PointGroup]]:
            for part in batched(produce(), chunk):
                yield groups_of(part)

        return self._write(run, check, chunks)

    def write_columns(self, run: RunRow, groups: Sequence[PointGroup], *, chunk: int | None = None) -> Written:
        """Write a run and all its values atomically, as :meth:`write_night`, from columns.

        The values come as they were selected, a :class:`~airflow_metric_gate.store.points.PointGroup`
        of parallel lists per declaration, and are written without an object per value.

        :param run: the run row (its status is written as given, normally ``pending``).
        :param groups: the run's values in ordinal order, one group per stretch of consecutive
            ordinals of one declaration.
        :param chunk: values per chunk (default :func:`~airflow_metric_gate.chunking.chunk_points`).
        :return: how many ``metric_values`` rows were written, and the write version.
        :raises StoreInputError: as :meth:`write_night`.
        """
        chunk = chunk_points(chunk)

        def check() -> None:
            for g in groups:
                if not all(map(math.isfinite, g.values)):
                    for step, value in zip(g.steps, g.values):
                        _refuse_non_finite(float(value), g.keys[0], step)

        return self._write(run, check, lambda: chunk_groups(groups, chunk))

    def _write(self, run: RunRow, check: Callable[[], None], chunks: Callable[[], Iterable[Sequence[PointGroup]]],
               ) -> Written:
        """Write a run: refuse a bad one (``check`` raises on a non-finite value), then its rows from ``chunks()``."""
        problem = Role.problem(run.role, "role") or RunStatus.problem(run.status, "status")
        if problem:
            raise StoreInputError(problem)
        check()
        prov = dict(run.provenance)
        columns = {key: prov.get(key) for key in PROVENANCE_COLUMNS}
        now = self._ts(datetime.now(timezone.utc))
        params = (
            run.run_id, run.series, run.backend, run.suite, run.role, run.status, self._ts(run.logical_date),
            now, now, *columns.values(), json.dumps(prov, sort_keys=True, default=str),
            json.dumps(run.declarations), json.dumps(run.selection_errors), run.status_reason,
            self._bool(run.rebaseline), json.dumps(run.outcomes) if run.outcomes else None,
        )
        names = (
            "run_id, series, backend, suite, role, status, logical_date, created_at, updated_at, "
            + ", ".join(PROVENANCE_COLUMNS)
            + ", provenance, declarations, selection_errors, status_reason, rebaseline, outcomes, write_version"
        )
        params = (*params, 1)
        names += ", run_key"
        self._prepare_write(run)
        updates = ", ".join(
            [f"{c} = excluded.{c}"
             for c in (
                 "series", "backend", "suite", "role", "status", "logical_date", "updated_at", *PROVENANCE_COLUMNS,
                 "provenance", "declarations", "selection_errors", "status_reason", "rebaseline", "outcomes",
             )] + ["write_version = runs.write_version + 1"]
        )
        # A run id names the run of one series identity: a write for another identity changes nothing.
        upsert = (
            f"INSERT INTO runs ({names}) VALUES ({', '.join(['%s'] * len(params))}, {{run_key}}) "
            f"ON CONFLICT (run_id) DO UPDATE SET {updates} "
            "WHERE runs.series = excluded.series AND runs.backend = excluded.backend AND runs.suite = excluded.suite"
        )
        with self._transaction(indexed=True) as cur:
            key_sql, key_params = self._new_run_key(cur, run)
            self._execute(cur, upsert.replace("{run_key}", key_sql), (*params, *key_params))
            if cur.rowcount == 0:
                self._execute(cur, "SELECT series, backend, suite FROM runs WHERE run_id = %s", (run.run_id,))
                series, backend, suite = cur.fetchone()
                raise StoreInputError(
                    f"store run id {run.run_id!r} already belongs to series {series!r} (backend {backend!r}, "
                    f"suite {suite!r}); refusing to store series {run.series!r} (backend {run.backend!r}, "
                    f"suite {run.suite!r}) under it: give this run an id of its own; nothing was stored"
                )
            self._execute(cur, "SELECT write_version, run_key FROM runs WHERE run_id = %s", (run.run_id,))
            version, run_key = (int(x) for x in cur.fetchone())
            self._execute(cur, "DELETE FROM metric_points WHERE run_key = %s", (run_key,))
            self._execute(cur, "DELETE FROM run_blocks WHERE run_key = %s", (run_key,))
            rows = self._write_points(cur, run_key, chunks())
        return Written(rows, version)

    def set_status(self, run_id: str, status: str, reason: str | None = None, *, enforce: bool | None = None,
                   outcomes: Mapping[str, Any] | None = None, write_version: int | None = None) -> None:
        """Set a run's status after evaluation.

        With ``write_version`` the status is kept only if the run still holds the values of that
        write (:meth:`write_night`), checked under the run's row lock in the transaction that marks:
        a verdict is never kept for values another writer of the same run id wrote meanwhile.

        :param run_id: the store run id.
        :param status: ``pending``, ``trusted`` or ``untrusted``.
        :param reason: a short note kept in ``runs.status_reason``.
        :param enforce: whether the evaluation was enforced, kept as the provenance key
            ``enforce`` (so that a verdict rebuilt later blocks as the evaluation did); ``None``
            leaves the provenance as it is.
        :param outcomes: what each declaration's night was (``runs.outcomes``), written in the same
            statement; ``None`` leaves it as it is.
        :param write_version: the write whose values were judged; ``None`` marks whatever is stored.
        :raises RunRewritten: the run holds another write's values now (nothing was changed).
        """
        problem = RunStatus.problem(status, "status")
        if problem:
            raise StoreInputError(problem)
        now = self._ts(datetime.now(timezone.utc))
        with self._transaction() as cur:
            if write_version is not None:
                self._execute(cur, f"SELECT write_version FROM runs WHERE run_id = %s{self._lock_rows}", (run_id,))
                row = cur.fetchone()
                if row is None or int(row[0]) != write_version:
                    raise RunRewritten(run_id, write_version, None if row is None else int(row[0]))
            if outcomes is not None:
                self._execute(cur, "UPDATE runs SET outcomes = %s WHERE run_id = %s", (json.dumps(outcomes), run_id))
            if enforce is None:
                self._execute(
                    cur, "UPDATE runs SET status = %s, status_reason = %s, updated_at = %s WHERE run_id = %s",
                    (status, reason, now, run_id),
                )
                return
            self._execute(cur, f"SELECT provenance FROM runs WHERE run_id = %s{self._lock_rows}", (run_id,))
            row = cur.fetchone()
            provenance = json.loads(row[0] or "{}") if row else {}
            provenance["enforce"] = bool(enforce)
            self._execute(
                cur,
                "UPDATE runs SET status = %s, status_reason = %s, provenance = %s, updated_at = %s WHERE run_id = %s",
                (status, reason, json.dumps(provenance, sort_keys=True, default=str), now, run_id),
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
        where, params = equal_to(((column, key), ("dag_id", dag_id), ("series", series), ("backend", backend),
                                  ("suite", suite)))
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
        marked_by: str = "hand",
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
        :param marked_by: who marks (kept with the mark in the run's provenance ``marks``).
        :return: every matching run, as it was, with its new status; empty when nothing matched.
        :raises StoreInputError: on an unknown status or ``by``, or an Airflow run id without ``dag_id``.
        """
        if status not in JUDGED_STATUSES:
            raise StoreInputError(f"can only mark runs trusted or untrusted, not {status!r}")
        where, params = self._match(by, key, dag_id, series, backend, suite)
        marked: list[MarkedRun] = []
        with self._transaction() as cur:
            self._execute(
                cur, f"SELECT {RUN_COLUMNS} FROM runs WHERE {where} ORDER BY logical_date, run_id{self._lock_rows}",
                params,
            )
            at = datetime.now(timezone.utc)
            now = self._ts(at)
            for run in [self._run_from_row(r) for r in cur.fetchall()]:
                changed = run.status != status
                note = reason if reason is not None else (f"marked {status} by hand" if changed else None)
                said = note  # what the mark says, kept with who and when in provenance
                if note is not None:  # the night's counts stay in front: the UI still shows them
                    note = with_counts(run.status_reason, note)
                if changed or (note is not None and note != run.status_reason):
                    # the mark is kept in provenance too: it overrides every declaration's own outcome
                    provenance = dict(run.provenance)
                    entry = {"status": status, "reason": said, "by": marked_by, "at": at.isoformat()}
                    provenance["marks"] = [*provenance.get("marks", []), entry]
                    self._execute(
                        cur,
                        "UPDATE runs SET status = %s, status_reason = %s, provenance = %s, updated_at = %s "
                        "WHERE run_id = %s",
                        (status, note, json.dumps(provenance, sort_keys=True, default=str), now, run.run_id),
                    )
                marked.append(MarkedRun(run, status, note if note is not None else run.status_reason))
        return marked

    def accept_level(self, series: str, backend: str, suite: str, *, since: str, reason: str,
                     by: str) -> dict[str, Any]:
        """Accept a series' level from a night on, in one transaction (see :mod:`airflow_metric_gate.accept`).

        :param series: the series name.
        :param backend: the backend.
        :param suite: the suite.
        :param since: the first night of the new level: a store run id, or an ISO 8601 logical date.
        :param reason: why (required).
        :param by: who accepts.
        :return: ``{"since", "since_run_id", "nights", "marked"}``.
        :raises StoreInputError: no reason, or no baseline night of the series at or after ``since``.
        """
        if not reason or not reason.strip():
            raise StoreInputError("accepting a level needs a reason")
        at = datetime.now(timezone.utc)
        with self._transaction() as cur:
            self._execute(cur, "SELECT logical_date FROM runs WHERE run_id = %s AND series = %s AND backend = %s "
                          "AND suite = %s", (since, series, backend, suite))
            row = cur.fetchone()
            if row is not None:
                start = self._from_ts(row[0])
            else:
                try:
                    start = utc(parse_datetime(since, "--since"))
                except (ValueError, OverflowError):
                    raise StoreInputError(
                        f"--since {since!r} is neither a store run id of series {series!r} (backend {backend!r}, "
                        f"suite {suite!r}) nor an ISO 8601 date") from None
            self._execute(
                cur, f"SELECT {RUN_COLUMNS} FROM runs WHERE series = %s AND backend = %s AND suite = %s "
                "AND role = 'baseline' AND status <> 'pending' AND logical_date >= %s "
                f"ORDER BY logical_date, run_id{self._lock_rows}",
                (series, backend, suite, self._ts(start)),
            )
            runs = [self._run_from_row(r) for r in cur.fetchall()]
            if not runs:
                raise StoreInputError(
                    f"series {series!r} (backend {backend!r}, suite {suite!r}) has no judged baseline night at or "
                    f"after {start.isoformat()}; nothing was changed")
            now = self._ts(at)
            accepted = f"accepted level since {runs[0].logical_date.isoformat()} by {by}: {reason.strip()}"
            self._execute(cur, "UPDATE runs SET rebaseline = %s, updated_at = %s WHERE run_id = %s",
                          (self._bool(True), now, runs[0].run_id))
            marked = 0
            for run in runs:
                provenance = dict(run.provenance)
                entry = {"status": "trusted", "reason": accepted, "by": by, "at": at.isoformat(), "accept": True}
                provenance["marks"] = [*provenance.get("marks", []), entry]
                marked += run.status != "trusted"
                self._execute(
                    cur, "UPDATE runs SET status = %s, status_reason = %s, provenance = %s, updated_at = %s "
                    "WHERE run_id = %s",
                    ("trusted", with_counts(run.status_reason, accepted), json.dumps(provenance, sort_keys=True,
                                                                                   default=str), now, run.run_id),
                )
        return {"since": runs[0].logical_date.isoformat(), "since_run_id": runs[0].run_id, "nights": len(runs),
                "marked": marked}

    def mark(
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
    ) -> int:
        """Mark runs trusted or untrusted (see :meth:`mark_runs`); return how many changed status.

        :param status: ``trusted`` or ``untrusted``.
        :param by: ``run_id``, ``airflow_run_id`` or ``commit``.
        :param key: the value to match.
        :param reason: a note kept in ``runs.status_reason``.
        :param dag_id: only runs of this DAG (see :meth:`mark_runs`).
        :param series: only runs of this series.
        :param backend: only runs of this backend.
        :param suite: only runs of this suite.
        :return: how many runs changed status.
        """
        marked = self.mark_runs(status, by=by, key=key, reason=reason, dag_id=dag_id, series=series, backend=backend,
                                suite=suite)
        return sum(m.changed for m in marked)

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

    def mark_run(self, run_id: str, status: str, *, reason: str, marked_by: str, at: datetime) -> int:
        """Mark one run (by store run id) trusted or untrusted by hand, and record who did it and why.

        The status, ``status_reason`` (the evaluation's counts, then ``marked <status> by <user>:
        <reason>``) and an entry appended to the run's provenance list ``marks`` (``{"status",
        "reason", "by", "at"}``) are written in one transaction.
        Idempotent: a run already in that status is left as it is.

        :param run_id: the store run id.
        :param status: ``trusted`` or ``untrusted``.
        :param reason: why (required, non-empty).
        :param marked_by: the user's name.
        :param at: when (kept in provenance).
        :return: how many runs changed (0 or 1).
        """
        if status not in JUDGED_STATUSES:
            raise StoreInputError(f"can only mark runs trusted or untrusted, not {status!r}")
        if not reason or not reason.strip():
            raise StoreInputError("marking a run needs a reason")
        lock = " FOR UPDATE" if self.dialect == "postgres" else ""
        with self._transaction() as cur:
            self._execute(
                cur, f"SELECT status, provenance, status_reason FROM runs WHERE run_id = %s{lock}", (run_id,)
            )
            row = cur.fetchone()
            if row is None or row[0] == status:
                return 0
            provenance = json.loads(row[1] or "{}")
            # Keep the evaluation's own note ("9 PASS, 4 FAIL") in front of the mark.
            evaluated = (row[2] or "").split("; marked ", 1)[0]
            note = f"marked {status} by {marked_by}: {reason.strip()}"
            if evaluated and not evaluated.startswith("marked "):
                note = f"{evaluated}; {note}"
            entry = {"status": status, "reason": reason.strip(), "by": marked_by, "at": utc(at).isoformat()}
            provenance["marks"] = [*provenance.get("marks", []), entry]
            self._execute(
                cur,
                "UPDATE runs SET status = %s, status_reason = %s, provenance = %s, updated_at = %s "
                "WHERE run_id = %s AND status <> %s",
                (
                    status, note,
                    json.dumps(provenance, sort_keys=True, default=str), self._ts(datetime.now(timezone.utc)),
                    run_id, status,
                ),
            )
            return cur.rowcount

    # -- retention -----------------------------------------------------------------------------

    def prune(
        self,
        *,
        keep: int | None = None,
        before: datetime | None = None,
        protect: int,
        series: str | None = None,
        backend: str | None = None,
        suite: str | None = None,
        force: bool = False,
        dry_run: bool = False,
    ) -> dict[str, Any]:
        """Remove old nights (runs and their values) of each series identity, in one transaction.

        A night is removed when it matches every criterion given: it is not among the ``keep``
        most recent nights of its series identity, and its logical date is before ``before``.
        Unless ``force``, the nights a current baseline may use are kept: per series identity the
        ``protect`` most recent judged baseline nights (what the next night's baseline is chosen
        from, under either policy), the night that carries the latest rebaseline marker, and every
        ``pending`` night.

        :param keep: keep the most recent ``keep`` nights of each series identity (any role).
        :param before: remove only nights whose logical date is before this.
        :param protect: how many of the most recent judged baseline nights a baseline may read.
        :param series: only this series.
        :param backend: only this backend.
        :param suite: only this suite.
        :param force: remove matching nights even when a current baseline uses them.
        :param dry_run: say what would be removed; change nothing.
        :return: ``{"nights", "values", "kept_for_baselines", "series", "run_ids", "partitions_dropped"}``
            (PostgreSQL drops a month's partition of ``metric_points`` when every run of it goes).
        :raises StoreInputError: neither ``keep`` nor ``before``, or a negative ``keep``.
        """
        if keep is None and before is None:
            raise StoreInputError("prune needs --keep N or --before DATE (or both)")
        if keep is not None and keep < 0:
            raise StoreInputError(f"--keep must be >= 0, got {keep}")
        where, params = equal_to((("series", series), ("backend", backend), ("suite", suite)))
        sql = "SELECT run_id, series, backend, suite, role, status, logical_date, rebaseline FROM runs"
        if where:
            sql += " WHERE " + " AND ".join(where)
        sql += " ORDER BY series, backend, suite, logical_date DESC, run_id DESC"
        removed: list[str] = []
        kept = 0
        identities: set[tuple[str, str, str]] = set()
        values = 0
        with self._transaction(indexed=True) as cur:
            self._execute(cur, sql + self._lock_rows, params)
            by_identity: dict[tuple[str, str, str], list[tuple]] = {}
            for row in cur.fetchall():
                by_identity.setdefault((row[1], row[2], row[3]), []).append(row)
            cutoff = None if before is None else utc(before)
            for identity, nights in by_identity.items():
                judged = 0
                fenced = False
                for position, (run_id, _, _, _, role, status, date, rebaseline) in enumerate(nights):
                    used = status == "pending" or (bool(rebaseline) and not fenced)
                    fenced = fenced or bool(rebaseline)
                    if role == "baseline" and status != "pending":
                        used = used or judged < protect
                        judged += 1
                    if keep is not None and position < keep:
                        continue
                    if cutoff is not None and self._from_ts(date) >= cutoff:
                        continue
                    if used and not force:
                        kept += 1
                        continue
                    removed.append(run_id)
                    identities.add(identity)
            batches = []
            for start in range(0, len(removed), _PRUNE_BATCH):
                batch = removed[start:start + _PRUNE_BATCH]
                marks = ", ".join(["%s"] * len(batch))
                self._execute(cur, f"SELECT run_key FROM runs WHERE run_id IN ({marks})", batch)
                batches.append((batch, [int(row[0]) for row in cur.fetchall()]))
            # the values of the months it empties go with their partition, once the rest is deleted
            whole = self._whole_months(cur, [k for _, keys in batches for k in keys])
            for batch, run_keys in batches:
                values += self._remove_values(cur, [k for k in run_keys if k not in whole], dry_run=dry_run)
                if not dry_run:
                    marks = ", ".join(["%s"] * len(batch))
                    keyed = ", ".join(["%s"] * len(run_keys))
                    self._execute(cur, f"DELETE FROM run_blocks WHERE run_key IN ({keyed})", run_keys)
                    self._execute(cur, f"DELETE FROM runs WHERE run_id IN ({marks})", batch)
            gone, partitions, dropped = self._drop_months(cur, whole, dry_run=dry_run)
            values += dropped + self._remove_values(cur, sorted(whole - gone), dry_run=dry_run)
        return {"nights": len(removed), "values": values, "kept_for_baselines": kept, "series": len(identities),
                "run_ids": removed, "partitions_dropped": partitions}

    def _remove_values(self, cur: Any, run_keys: list[int], *, dry_run: bool) -> int:
        """Delete (unless ``dry_run``) the ``metric_points`` rows of these runs; return how many there are."""
        values = 0
        for start in range(0, len(run_keys), _PRUNE_BATCH):
            chunk = run_keys[start:start + _PRUNE_BATCH]
            keyed = ", ".join(["%s"] * len(chunk))
            self._execute(cur, f"SELECT COUNT(*) FROM metric_points WHERE run_key IN ({keyed})", chunk)
            values += int(cur.fetchone()[0])
            if not dry_run:
                self._execute(cur, f"DELETE FROM metric_points WHERE run_key IN ({keyed})", chunk)
        return values

    # -- reads ---------------------------------------------------------------------------------

    def _run_from_row(self, row: Sequence[Any]) -> RunRow:
        return RunRow(
            run_id=row[0], series=row[1], backend=row[2], suite=row[3], role=row[4], status=row[5],
            logical_date=self._from_ts(row[6]), provenance=json.loads(row[7] or "{}"),
            declarations=json.loads(row[8] or "[]"), selection_errors=json.loads(row[9] or "[]"),
            status_reason=row[10], rebaseline=bool(row[11]), outcomes=json.loads(row[12] or "{}"),
            write_version=int(row[13] or 0),
        )

    def get_run(self, run_id: str) -> RunRow | None:
        """Return a run's row, or ``None`` if the store has no such run.

        :param run_id: the store run id.
        """
        with self._transaction() as cur:
            self._execute(cur, f"SELECT {RUN_COLUMNS} FROM runs WHERE run_id = %s", (run_id,))
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
            self._execute(cur, f"SELECT {RUN_COLUMNS} FROM runs WHERE {where} ORDER BY logical_date, run_id", params)
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
        sql = f"SELECT {RUN_COLUMNS} FROM runs"
        where, params = equal_to((("series", series), ("backend", backend), ("suite", suite)))
        if where:
            sql += " WHERE " + " AND ".join(where)
        sql += " ORDER BY logical_date DESC, run_id DESC LIMIT %s"
        params.append(limit)
        with self._transaction() as cur:
            self._execute(cur, sql, params)
            return [self._run_from_row(r) for r in cur.fetchall()]

    def run_values_and_baselines(
        self, run_id: str, history_limit: int
    ) -> tuple[list[ValueRow], dict[int, list[float]]]:
        """Read a run's values and, in one set-based statement, the baselines of all its coordinates.

        The baseline of a coordinate is its values in the ``history_limit`` most recent runs of the
        same series identity that are ``baseline`` and ``trusted``, have an earlier logical date, are
        not the run itself, and do not precede the latest rebaseline marker.

        The values come back unaggregated, so the caller's reference (an exactly rounded mean, or
        a median) does not depend on the order the database returned them in.

        :param run_id: the store run id.
        :param history_limit: how many baseline runs to read.
        :return: the run's values in ordinal order, and each ordinal's baseline values.
        """
        with self._transaction(indexed=True) as cur:
            run_key = self._run_key(cur, run_id)
            current, ordinals = self._read_run(cur, run_key)
            history: dict[int, list[float]] = {}
            base: list[int] = []
            if current and history_limit > 0:
                self._execute(cur, BASELINE_RUNS_SQL, (run_id, run_id, history_limit))
                base = [int(row[1]) for row in cur.fetchall()]
            if base:
                arrays = self.dialect == "postgres"
                self._plan_bulk_join(cur)
                self._execute(cur, baseline_sql(len(base), arrays=arrays), (*base, run_key))
                at = ordinals.ordinal
                if arrays:
                    history = {at(coordinate): values for coordinate, values in cur.fetchall()}
                else:
                    history = _group_by_ordinal((at(coordinate), value) for coordinate, value in cur.fetchall())
        return current, history

    def iter_values_and_baselines(
        self, run_id: str, history_limit: int, *, chunk: int | None = None
    ) -> Iterator[tuple[ValueRow, list[float]]]:
        """Yield a run's values with their baselines, in ordinal order, read chunk by chunk.

        The same values and baselines as :meth:`run_values_and_baselines`, in one transaction, but
        at most ``chunk`` coordinates are read and held at a time: one statement per chunk reads
        their values, another their baselines (each baseline run's rows of those coordinates only,
        through the (run, coordinate) key).

        :param run_id: the store run id.
        :param history_limit: how many baseline runs to read.
        :param chunk: coordinates per chunk (default :func:`~airflow_metric_gate.chunking.chunk_points`).
        """
        chunk = chunk_points(chunk)
        with self._transaction(indexed=True) as cur:
            run_key = self._run_key(cur, run_id)
            ordinals = self._ordinals(cur, run_key)
            if run_key is None or not ordinals.blocks:
                return
            keys = self._declaration_keys(cur, ordinals.declarations())
            base: list[int] = []
            if history_limit > 0:
                self._execute(cur, BASELINE_RUNS_SQL, (run_id, run_id, history_limit))
                base = [int(row[1]) for row in cur.fetchall()]
            arrays = self.dialect == "postgres"
            most = self._ranges_per_chunk(len(base))
            for ranges in _chunk_ranges(ordinals, chunk, most):
                bounds = [(lo, hi) for lo, hi, _ in ranges]
                steps: dict[int, int] = {}
                for lo, hi, declaration in ranges:
                    self._execute(cur, "SELECT coordinate, step FROM coordinates WHERE declaration = %s "
                                  "AND coordinate BETWEEN %s AND %s", (declaration, lo, hi))
                    steps.update(cur.fetchall())
                self._execute(cur, "SELECT coordinate, value, at_step FROM metric_points WHERE run_key = %s"
                              + in_ranges("coordinate", len(bounds)), [run_key, *[b for r in bounds for b in r]])
                rows = sorted(((ordinals.ordinal(c), c, value, at_step) for c, value, at_step in cur.fetchall()),
                              key=_first)
                history: dict[int, list[float]] = {}
                if base:
                    self._plan_bulk_join(cur)
                    self._execute(cur, baseline_sql(len(base), arrays=arrays, ranges=len(bounds)),
                                  baseline_params(base, run_key, bounds))
                    if arrays:
                        history = {coordinate: values for coordinate, values in cur.fetchall()}
                    else:
                        history = _group_by_ordinal(cur.fetchall())  # grouped by coordinate here
                    self._plan_bulk_join(cur, on=False)
                no_values: list[float] = []
                for ordinal, coordinate, value, at_step in rows:
                    metric_key, steps_key, constraint_key = keys[ordinals.declaration(coordinate)]
                    step = steps[coordinate]
                    yield (ValueRow(ordinal, metric_key, steps_key, constraint_key, step, value,
                                    read_at_step(step, at_step)), history.get(coordinate, no_values))

    #: Parameters one statement may bind, with room to spare (dialects lower it).
    max_parameters = 16000

    def _ranges_per_chunk(self, other_runs: int) -> int:
        """How many coordinate ranges a chunk's statements bind, with ``other_runs`` branches besides the run's.

        Every range binds two parameters in each branch: a chunk's statement stays below
        :attr:`max_parameters`.
        """
        return max(1, min(_RANGES_PER_CHUNK, (self.max_parameters // (other_runs + 1) - 1) // 2))

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

    def _read_run(self, cur: Any, run_key: int | None) -> tuple[list[ValueRow], Ordinals]:
        """Return a run's values in ordinal order, and its blocks."""
        ordinals = self._ordinals(cur, run_key)
        if not ordinals.blocks:
            return [], ordinals
        keys = self._declaration_keys(cur, ordinals.declarations())
        steps = self._steps(cur, ordinals)
        self._execute(cur, "SELECT coordinate, value, at_step FROM metric_points WHERE run_key = %s", (run_key,))
        out = []
        for coordinate, value, at_step in cur.fetchall():
            metric_key, steps_key, constraint_key = keys[ordinals.declaration(coordinate)]
            step = steps[coordinate]
            out.append(ValueRow(ordinals.ordinal(coordinate), metric_key, steps_key, constraint_key,
                                step, value, read_at_step(step, at_step)))
        out.sort(key=lambda v: v.ordinal)
        return out, ordinals

    def run_values(self, run_id: str) -> list[ValueRow]:
        """Return a run's values in ordinal order.

        :param run_id: the store run id.
        """
        with self._transaction(indexed=True) as cur:
            return self._read_run(cur, self._run_key(cur, run_id))[0]

    def judged_candidates(self, run_id: str, limit: int) -> list[tuple[str, datetime, str, str | None, dict]]:
        """Return the earlier judged baseline nights of a run, oldest first (see :data:`CANDIDATE_RUNS_SQL`).

        :param run_id: the store run id.
        :param limit: at most this many nights, the most recent.
        :return: ``(run_id, logical_date, status, latest mark's status or None, outcomes)`` per night.
        """
        with self._transaction() as cur:
            self._execute(cur, CANDIDATE_RUNS_SQL, (run_id, run_id, limit))
            rows = cur.fetchall()
        out = []
        for rid, date, status, provenance, outcomes in reversed(rows):
            marks = json.loads(provenance or "{}").get("marks") or []
            out.append((rid, self._from_ts(date), status, marks[-1].get("status") if marks else None,
                        json.loads(outcomes or "{}")))
        return out

    def values_in_runs(self, run_id: str, run_ids: Sequence[str]) -> list[tuple[int, str, float]]:
        """Return, for each coordinate of a run, its value in each of some other runs, in one statement.

        :param run_id: the store run id whose coordinates are read.
        :param run_ids: the other runs.
        :return: ``(ordinal, other run id, value)`` rows.
        """
        if not run_ids:
            return []
        names = list(run_ids)
        with self._transaction(indexed=True) as cur:
            run_key = self._run_key(cur, run_id)
            ordinals = self._ordinals(cur, run_key)
            keys: dict[str, int] = {}
            for start in range(0, len(names), _KEY_BATCH):
                chunk = names[start:start + _KEY_BATCH]
                marks = ", ".join(["%s"] * len(chunk))
                self._execute(cur, f"SELECT run_id, run_key FROM runs WHERE run_id IN ({marks})", chunk)
                keys.update({rid: int(key) for rid, key in cur.fetchall()})
            others = [(k, keys[name]) for k, name in enumerate(names) if name in keys]
            if run_key is None or not others:
                return []
            self._plan_bulk_join(cur)
            self._execute(cur, run_values_sql(len(others)), (*[key for _, key in others], run_key))
            at = ordinals.ordinal
            return [(at(coordinate), names[others[k][0]], value) for coordinate, k, value in cur.fetchall()]

    def declaration_night(
        self, run_id: str, key: tuple[str, str, str], run_ids: Sequence[str]
    ) -> tuple[list[ValueRow], dict[str, dict[int, float]]]:
        """Return one declaration's values in a run, and its values in some other runs, in one transaction.

        What :meth:`run_values` and :meth:`values_in_runs` read, for one declaration's coordinates
        only (read through their index ranges): a night judged declaration by declaration holds one
        declaration's values and history at a time.  The other runs' values come in the shape the
        calibrated policy judges them in: by run, then by step (each coordinate's step is the one
        the run's own row gives it, so no ordinal is worked out per value).

        :param run_id: the store run id.
        :param key: the declaration's ``(metric_key, steps_key, constraint_key)``.
        :param run_ids: the other runs.
        :return: the values in ordinal order, and each other run's values by step (a run with
            none of the declaration's coordinates is left out).
        """
        with self._transaction(indexed=True) as cur:
            run_key = self._run_key(cur, run_id)
            found = self._declaration_ids(cur, [key], add=False)
            if run_key is None or key not in found:
                return [], {}
            declaration = found[key]
            ordinals = self._ordinals(cur, run_key, declaration)
            if not ordinals.blocks:
                return [], {}
            names = list(run_ids)
            others: list[tuple[int, int]] = []
            for start in range(0, len(names), _KEY_BATCH):
                chunk = names[start:start + _KEY_BATCH]
                marks = ", ".join(["%s"] * len(chunk))
                self._execute(cur, f"SELECT run_id, run_key FROM runs WHERE run_id IN ({marks})", chunk)
                keys = {rid: int(k) for rid, k in cur.fetchall()}
                others += [(start + i, keys[name]) for i, name in enumerate(chunk) if name in keys]
            most = self._ranges_per_chunk(len(others))
            current: list[ValueRow] = []
            # one dict per other run, by its position among ``others`` (the statement's ``k``)
            by_position: list[dict[int, float]] = [{} for _ in others]
            for ranges in _chunk_ranges(ordinals, len(ordinals), most):
                bounds = [(lo, hi) for lo, hi, _ in ranges]
                flat = [b for r in bounds for b in r]
                self._execute(cur, "SELECT p.coordinate, c.step, p.value, p.at_step FROM metric_points p "
                              "JOIN coordinates c ON c.coordinate = p.coordinate "
                              "WHERE p.run_key = %s AND c.declaration = %s" + in_ranges("p.coordinate", len(bounds)),
                              [run_key, declaration, *flat])
                fetched = cur.fetchall()
                current += [ValueRow(ordinals.ordinal(coordinate), *key, step, value, read_at_step(step, at))
                            for coordinate, step, value, at in fetched]
                if others:
                    step_of = {int(coordinate): int(step) for coordinate, step, _, _ in fetched}
                    self._plan_bulk_join(cur)
                    self._execute(cur, run_values_sql(len(others), ranges=len(bounds)),
                                  baseline_params([k for _, k in others], run_key, bounds))
                    for coordinate, k, value in cur.fetchall():
                        by_position[k][step_of[coordinate]] = value
                    self._plan_bulk_join(cur, on=False)
                del fetched
        current.sort(key=lambda v: v.ordinal)
        return current, {names[i]: values for (i, _), values in zip(others, by_position) if values}

    def history_window(self, run_id: str, history_limit: int) -> HistoryWindow:
        """Return the history window of a run, in one statement (see :data:`HISTORY_WINDOW_SQL`).

        The window is what the run's baseline is read from once the window's ``pending`` runs are
        judged: a ``pending`` run in it may still become trusted, so judging the run before then
        would read too little history.  An ``untrusted`` run never enters a baseline, so it takes
        no place in the window.

        :param run_id: the store run id.
        :param history_limit: how many baseline runs the run's baseline reads.
        """
        with self._transaction() as cur:
            self._execute(cur, HISTORY_WINDOW_SQL, (run_id, run_id, history_limit))
            rows = cur.fetchall()
        since = rows[0][4] if rows else None
        runs = [WindowRun(r[0], self._from_ts(r[1]), r[2], r[3]) for r in rows if r[0] is not None]
        return HistoryWindow(
            runs, history_limit, None if since is None else self._from_ts(since), found=bool(rows and rows[0][5])
        )

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
            f"d.steps_key, d.constraint_key, c.step, {AT_STEP_SQL.format(p='v', c='c')}, v.value "
            "FROM runs r CROSS JOIN declarations d JOIN coordinates c ON c.declaration = d.declaration "
            "JOIN metric_points v ON v.run_key = r.run_key AND v.coordinate = c.coordinate "
            "WHERE "
        )
        where, params = equal_to((("d.metric_key", metric_key), ("r.series", series), ("r.backend", backend),
                                  ("r.suite", suite), ("c.step", step)))
        sql += " AND ".join(where)
        # a value's ordinal: its block's first ordinal plus its distance from the block's first coordinate
        sql += (" ORDER BY r.logical_date DESC, r.run_id DESC, (SELECT b.ordinal - b.coordinate FROM run_blocks b "
                "WHERE b.run_key = v.run_key AND b.coordinate <= v.coordinate ORDER BY b.coordinate DESC LIMIT 1) "
                "+ v.coordinate LIMIT %s")
        params.append(limit)
        keys = (
            "run_id", "logical_date", "backend", "suite", "role", "status",
            "steps_key", "constraint_key", "step", "at_step", "value",
        )
        with self._transaction(indexed=True) as cur:
            self._execute(cur, sql, params)
            rows = [dict(zip(keys, row)) for row in cur.fetchall()]
        for row in rows:
            row["logical_date"] = self._from_ts(row["logical_date"]).isoformat()
        return rows

    # -- reads for the UI: one series identity, bounded, each served by an index ------------------

    @staticmethod
    def _dag_filter(dag_ids: Iterable[str] | None, include_unowned: bool) -> tuple[str, list[Any]]:
        """Return an SQL condition on ``r.dag_id`` (bound parameters) for the DAGs a reader may see."""
        if dag_ids is None:
            return "", []
        ids = sorted(set(dag_ids))
        parts = []
        if ids:
            parts.append(f"r.dag_id IN ({', '.join(['%s'] * len(ids))})")
        if include_unowned:
            parts.append("r.dag_id IS NULL")
        if not parts:
            return " AND 1 = 0", []
        return f" AND ({' OR '.join(parts)})", ids

    def series_identities(self, *, limit: int = 500) -> list[dict]:
        """Return each series identity with the DAGs that wrote it, its run count and latest logical date.

        One row per (series, backend, suite, dag_id), ordered by series identity.

        :param limit: at most this many rows.
        """
        sql = (
            "SELECT series, backend, suite, dag_id, COUNT(*), MAX(logical_date) FROM runs "
            "GROUP BY series, backend, suite, dag_id ORDER BY series, backend, suite, dag_id LIMIT %s"
        )
        with self._transaction() as cur:
            self._execute(cur, sql, (limit,))
            rows = cur.fetchall()
        keys = ("series", "backend", "suite", "dag_id", "runs", "latest")
        out = [dict(zip(keys, row)) for row in rows]
        for row in out:
            row["latest"] = self._from_ts(row["latest"])
        return out

    def series_dag_ids(self, series: str, backend: str, suite: str) -> set[str | None]:
        """Return the DAG ids (``None`` for runs written outside Airflow) that wrote a series identity.

        :param series: the series name.
        :param backend: the backend.
        :param suite: the suite.
        """
        with self._transaction() as cur:
            self._execute(
                cur,
                "SELECT DISTINCT dag_id FROM runs WHERE series = %s AND backend = %s AND suite = %s",
                (series, backend, suite),
            )
            return {row[0] for row in cur.fetchall()}

    def series_runs(
        self,
        series: str,
        backend: str,
        suite: str,
        *,
        dag_ids: Iterable[str] | None = None,
        include_unowned: bool = True,
        limit: int = 50,
        offset: int = 0,
        declarations: bool = True,
    ) -> list[RunRow]:
        """Return one page of the runs of a series identity, newest logical date first.

        Served by ``runs_series_date_idx``; no values are read.

        :param series: the series name.
        :param backend: the backend.
        :param suite: the suite.
        :param dag_ids: only runs written by these DAGs (``None``: any).
        :param include_unowned: with ``dag_ids``, also the runs with no DAG (written by the CLI).
        :param limit: page size.
        :param offset: runs to skip.
        :param declarations: also read each run's declarations (a page of runs does not need them).
        """
        where, params = self._dag_filter(dag_ids, include_unowned)
        columns = RUN_COLUMNS if declarations else RUN_COLUMNS.replace("declarations,", "NULL,", 1)
        sql = (
            f"SELECT {columns} FROM runs r WHERE r.series = %s AND r.backend = %s AND r.suite = %s{where} "
            "ORDER BY r.logical_date DESC, r.run_id DESC LIMIT %s OFFSET %s"
        )
        with self._transaction() as cur:
            self._execute(cur, sql, (series, backend, suite, *params, limit, offset))
            return [self._run_from_row(r) for r in cur.fetchall()]

    def coordinate_history(
        self,
        series: str,
        backend: str,
        suite: str,
        *,
        metric_key: str,
        steps_key: str,
        constraint_key: str,
        step: int,
        until: datetime | None = None,
        dag_ids: Iterable[str] | None = None,
        include_unowned: bool = True,
        limit: int = 30,
    ) -> list[dict]:
        """Return one coordinate's value in the latest runs of a series identity, oldest first.

        The runs come from ``runs_series_date_idx`` in logical-date order; each run's value is one
        lookup in ``metric_values_run_coordinate_key``.  Runs without that coordinate are left out.

        :param series: the series name.
        :param backend: the backend.
        :param suite: the suite.
        :param metric_key: the coordinate's metric.
        :param steps_key: the coordinate's steps key.
        :param constraint_key: the coordinate's constraint key.
        :param step: the stored step.
        :param until: only runs with a logical date at or before this one.
        :param dag_ids: only runs written by these DAGs (``None``: any).
        :param include_unowned: with ``dag_ids``, also the runs with no DAG.
        :param limit: at most this many runs (the latest ones).
        :return: dicts with ``run_id``, ``logical_date``, ``role``, ``status``, ``dag_id``,
            ``airflow_run_id``, ``value`` and ``at_step``.
        """
        where, params = self._dag_filter(dag_ids, include_unowned)
        if until is not None:
            where += " AND r.logical_date <= %s"
            params = [*params, self._ts(until)]
        sql = (
            "SELECT r.run_id, r.logical_date, r.role, r.status, r.dag_id, r.airflow_run_id, v.value, v.at_step "
            "FROM runs r JOIN metric_points v ON v.run_key = r.run_key AND v.coordinate = %s "
            f"WHERE r.series = %s AND r.backend = %s AND r.suite = %s{where} "
            "ORDER BY r.logical_date DESC, r.run_id DESC LIMIT %s"
        )
        keys = ("run_id", "logical_date", "role", "status", "dag_id", "airflow_run_id", "value", "at_step")
        with self._transaction(indexed=True) as cur:
            declaration = self._declaration_ids(cur, [(metric_key, steps_key, constraint_key)], add=False)
            if not declaration:
                return []
            self._execute(cur, "SELECT coordinate FROM coordinates WHERE declaration = %s AND step = %s",
                          (next(iter(declaration.values())), step))
            found = cur.fetchone()
            if found is None:
                return []
            self._execute(cur, sql, (found[0], series, backend, suite, *params, limit))
            rows = [dict(zip(keys, row)) for row in cur.fetchall()]
        for row in rows:
            row["logical_date"] = self._from_ts(row["logical_date"])
            row["at_step"] = read_at_step(step, row["at_step"])
        rows.reverse()
        return rows

    def declaration_values(
        self, run_id: str, metric_key: str, steps_key: str, constraint_key: str, *, limit: int = 10_000
    ) -> list[ValueRow]:
        """Return the values one declaration stored for a run, in step order (a range of the run's key).

        :param run_id: the store run id.
        :param metric_key: the declaration's metric.
        :param steps_key: the declaration's steps key.
        :param constraint_key: the declaration's constraint key.
        :param limit: at most this many values.
        """
        with self._transaction(indexed=True) as cur:
            found = self._declaration_ids(cur, [(metric_key, steps_key, constraint_key)], add=False)
            run_key = self._run_key(cur, run_id)
            if not found or run_key is None:
                return []
            declaration = next(iter(found.values()))
            ordinals = self._ordinals(cur, run_key, declaration)
            if not ordinals.blocks:
                return []
            lo, hi = ordinals.declarations()[declaration]
            self._execute(
                cur,
                "SELECT p.coordinate, c.step, p.value, p.at_step FROM metric_points p "
                "JOIN coordinates c ON c.coordinate = p.coordinate "
                "WHERE p.run_key = %s AND p.coordinate BETWEEN %s AND %s AND c.declaration = %s "
                "ORDER BY c.step LIMIT %s",
                (run_key, lo, hi, declaration, limit),
            )
            return [ValueRow(ordinals.ordinal(coordinate), metric_key, steps_key, constraint_key, step, value,
                             read_at_step(step, at)) for coordinate, step, value, at in cur.fetchall()]

    def declaration_baselines(
        self, run_id: str, metric_key: str, steps_key: str, constraint_key: str, history_limit: int
    ) -> dict[int, list[float]]:
        """Return the baseline values of every step of one declaration of a run, by step.

        The baseline runs are those :meth:`run_values_and_baselines` uses for the same ``history_limit``.

        :param run_id: the store run id.
        :param metric_key: the declaration's metric.
        :param steps_key: the declaration's steps key.
        :param constraint_key: the declaration's constraint key.
        :param history_limit: how many baseline runs.
        """
        out: dict[int, list[float]] = {}
        with self._transaction(indexed=True) as cur:
            self._execute(cur, BASELINE_RUNS_SQL, (run_id, run_id, history_limit))
            base = [int(row[1]) for row in cur.fetchall()]
            found = self._declaration_ids(cur, [(metric_key, steps_key, constraint_key)], add=False)
            if not base or not found:
                return out
            declaration = next(iter(found.values()))
            self._execute(cur, "SELECT MIN(coordinate), MAX(coordinate) FROM coordinates WHERE declaration = %s",
                          (declaration,))
            lo, hi = cur.fetchone()
            # The baseline runs as a VALUES list joined on the (run_key, coordinate) key: one short
            # range per run.
            runs = ", ".join(["(%s)"] * len(base))
            self._execute(
                cur,
                f"SELECT c.step, m.value FROM (VALUES {runs}) b JOIN metric_points m ON m.run_key = b.column1 "
                "AND m.coordinate BETWEEN %s AND %s JOIN coordinates c ON c.coordinate = m.coordinate "
                "WHERE c.declaration = %s",
                (*base, lo, hi, declaration),
            )
            for step, value in cur.fetchall():
                out.setdefault(step, []).append(value)
        return out

    def count(self, table: str, run_id: str | None = None) -> int:
        """Return the row count of ``runs`` or ``metric_values`` (optionally of one run).

        :param table: ``runs`` or ``metric_values``.
        :param run_id: count only this run's rows.
        """
        if table not in ("runs", "metric_values"):
            raise StoreInputError(f"unknown table {table!r}")
        sql = "SELECT COUNT(*) FROM runs" if table == "runs" else "SELECT COUNT(*) FROM metric_points"
        params: tuple = ()
        if run_id is not None:
            sql += (" WHERE run_id = %s" if table == "runs"
                    else " WHERE run_key = (SELECT run_key FROM runs WHERE run_id = %s)")
            params = (run_id,)
        with self._transaction() as cur:
            self._execute(cur, sql, params)
            return int(cur.fetchone()[0])

    def series_runs_and_blocks(
        self, series: str, backend: str, suite: str
    ) -> list[tuple[RunRow, list[tuple[str, str, str, int]]]]:
        """Return every run of one series identity in logical-date order with the blocks of its values.

        One statement.  A block is the values of one declaration in a run, ``(metric_key,
        steps_key, constraint_key, count)``; a run's blocks come in the order the database itself
        sorts their keys in (:meth:`_key_order`, then :meth:`_in_key_order`), and
        :meth:`iter_series_points` yields their values in that same order, so that replay reads no
        key per value.

        :param series: the series name.
        :param backend: the backend.
        :param suite: the suite.
        """
        if self.dialect == "postgres":  # the statement orders each run's blocks as the values are read
            blocks = ("(SELECT json_agg(json_build_array(b.metric_key, b.steps_key, b.constraint_key, b.n) "
                      f"ORDER BY {self._key_order('b')})::text ")
        else:
            blocks = "(SELECT json_group_array(json_array(b.metric_key, b.steps_key, b.constraint_key, b.n)) "
        blocks += ("FROM (SELECT d.metric_key, d.steps_key, d.constraint_key, SUM(w.length) AS n "
                   "FROM run_blocks w JOIN declarations d ON d.declaration = w.declaration "
                   "WHERE w.run_key = runs.run_key GROUP BY d.metric_key, d.steps_key, d.constraint_key) b)")
        with self._transaction() as cur:
            self._execute(
                cur,
                f"SELECT {RUN_COLUMNS}, {blocks} FROM runs WHERE series = %s AND backend = %s AND suite = %s "
                "ORDER BY logical_date, run_id",
                (series, backend, suite),
            )
            rows = cur.fetchall()
        return [(self._run_from_row(row), self._in_key_order(json.loads(row[len(row) - 1] or "[]")))
                for row in rows]

    def _key_order(self, alias: str) -> str:
        """The ``ORDER BY`` terms of a run's values by their keys, the same in both statements of replay.

        Text is compared byte by byte as the database stores it (``COLLATE "C"`` on PostgreSQL,
        SQLite's default), never by a language's collation.

        :param alias: the table alias.
        """
        c = ' COLLATE "C"' if self.dialect == "postgres" else ""
        return f"{alias}.metric_key{c}, {alias}.steps_key{c}, {alias}.constraint_key{c}"

    def _in_key_order(self, blocks: list[list]) -> list[tuple[str, str, str, int]]:
        """Return a run's blocks in the order :meth:`_key_order` sorts their values in.

        The statement of :meth:`series_runs_and_blocks` already ordered them; a dialect whose
        aggregate cannot order overrides this.

        :param blocks: ``[metric_key, steps_key, constraint_key, count]`` lists.
        """
        return [tuple(b) for b in blocks]

    def iter_series_points(
        self, series: str, backend: str, suite: str, *, batch: int = 10_000
    ) -> Iterator[tuple[int, float, int | None]]:
        """Yield every stored value of one series identity in one ordered pass, without its keys.

        Values come in the order of :meth:`series_runs_and_blocks` (logical date, run id), then by
        ``(metric_key, steps_key, constraint_key, step)``, as ``(step, value, at_step)``; the runs'
        blocks say which declaration each value belongs to.  One statement, fetched in batches,
        whatever the number of runs or coordinates.  The order is the one of the unique key of the
        values, so the embedded store reads them from its index without sorting (the run's rowid
        tells it that no two runs share a place in the order); the text keys are compared as
        :meth:`_key_order` says.

        :param series: the series name.
        :param backend: the backend.
        :param suite: the suite.
        :param batch: rows fetched at a time.
        """
        return chain.from_iterable(self.iter_series_point_batches(series, backend, suite, batch=batch))

    def iter_series_point_batches(
        self, series: str, backend: str, suite: str, *, batch: int = 10_000
    ) -> Iterator[list[tuple[int, float, int | None]]]:
        """Yield the values of :meth:`iter_series_points` in lists of at most ``batch``, as fetched.

        :param series: the series name.
        :param backend: the backend.
        :param suite: the suite.
        :param batch: rows fetched at a time.
        """
        keys = self._key_order("d")
        sql = (
            f"SELECT c.step, v.value, {AT_STEP_SQL.format(p='v', c='c')} "
            "FROM runs r JOIN metric_points v ON v.run_key = r.run_key "
            "JOIN coordinates c ON c.coordinate = v.coordinate JOIN declarations d ON d.declaration = c.declaration "
            "WHERE r.series = %s AND r.backend = %s AND r.suite = %s "
            f"ORDER BY r.logical_date, r.run_id, {keys}, c.step"
        )
        return self._batches(sql, (series, backend, suite), batch)

    def _batches(self, sql: str, params: Sequence[Any], batch: int) -> Iterator[list[tuple]]:
        """Yield the rows of one statement in lists of ``batch``, in one read transaction."""
        with self._transaction() as cur:
            self._execute(cur, sql, params)
            while True:
                rows = cur.fetchmany(batch)
                if not rows:
                    break
                yield rows


#: Keys bound per statement when looking declarations or runs up.
_KEY_BATCH = 200
#: At most this many coordinate ranges in one chunk's statements (see :func:`_chunk_ranges`).
_RANGES_PER_CHUNK = 64


def steps_digest(steps: Iterable[int]) -> str:
    """Return the MD5 hex digest of steps written in decimal and joined by commas (as the store digests them).

    :param steps: the steps, in order.
    """
    return hashlib.md5(",".join(map(str, steps)).encode(), usedforsecurity=False).hexdigest()


def _refuse_non_finite(value: float, metric_key: str, step: int) -> None:
    """Refuse a non-finite value before anything is written."""
    if not math.isfinite(value):
        raise StoreInputError(
            f"refusing to store non-finite value {value!r} for {metric_key} step {step}; nothing was written"
        )


def groups_of(values: Iterable[ValueRow]) -> list[PointGroup]:
    """Return values in ordinal order as groups: one per stretch of consecutive ordinals of one declaration.

    :param values: the values, in ordinal order.
    """
    groups: list[PointGroup] = []
    keys: tuple[str, str, str] | None = None
    steps: list[int] = []
    kept: list[float] = []
    at_steps: list[int | None] = []
    next_ordinal = 0
    for v in values:
        these = (v.metric_key, v.steps_key, v.constraint_key)
        if these != keys or v.ordinal != next_ordinal:
            keys, steps, kept, at_steps = these, [], [], []
            groups.append(PointGroup(keys, v.ordinal, steps, kept, at_steps))
        steps.append(v.step)
        kept.append(v.value)
        at_steps.append(v.at_step)
        next_ordinal = v.ordinal + 1
    return groups


def chunk_groups(groups: Iterable[PointGroup], chunk: int) -> Iterator[list[PointGroup]]:
    """Yield groups cut into chunks of at most ``chunk`` values (a group longer than the rest of a chunk is cut).

    :param groups: the groups, in ordinal order.
    :param chunk: the most values in one chunk (>= 1).
    """
    part: list[PointGroup] = []
    room = chunk
    for g in groups:
        start, n = 0, len(g)
        while start < n:
            take = min(room, n - start)
            part.append(g if take == n else g.part(start, start + take))
            start += take
            room -= take
            if room == 0:
                yield part
                part, room = [], chunk
    if part:
        yield part


def _first(item: tuple) -> Any:
    return item[0]


def _chunk_ranges(ordinals: Ordinals, chunk: int, most: int) -> Iterator[list[tuple[int, int, int]]]:
    """Split a run's coordinates into chunks in ordinal order: ``(lowest, highest, declaration)`` ranges.

    A chunk holds at most ``chunk`` coordinates and ``most`` ranges; a block longer than a chunk
    is cut into several.

    :param ordinals: the run's blocks.
    :param chunk: coordinates per chunk.
    :param most: ranges per chunk.
    """
    ranges: list[tuple[int, int, int]] = []
    size = 0
    for coordinate, _, length, declaration in sorted(ordinals.blocks, key=lambda b: b[1]):
        start = 0
        while start < length:
            take = min(length - start, chunk - size)
            ranges.append((coordinate + start, coordinate + start + take - 1, declaration))
            size += take
            start += take
            if size >= chunk or len(ranges) >= most:
                yield ranges
                ranges, size = [], 0
    if ranges:
        yield ranges

#: Runs removed per statement by :meth:`MetricStore.prune`.
_PRUNE_BATCH = 500


def _group_by_ordinal(rows: Iterable[tuple[int, float]]) -> dict[int, list[float]]:
    history: dict[int, list[float]] = {}
    for ordinal, value in rows:
        values = history.get(ordinal)
        if values is None:
            history[ordinal] = [value]
        else:
            values.append(value)
    return history
