"""Writing a night: its run row and its values, in one transaction, replacing an earlier write of the same run.
"""

from __future__ import annotations

import heapq
import json
import math
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from datetime import datetime, timezone
from typing import Any

from airflow_metric_gate.chunking import batched, chunk_points
from airflow_metric_gate.enums import Role, RunStatus
from airflow_metric_gate.store.coordinates import StoreCoordinates
from airflow_metric_gate.store.errors import RunRewritten, StoreInputError
from airflow_metric_gate.store.points import Block, PointGroup, PointRows
from airflow_metric_gate.store.rows import POINT_COLUMNS, PROVENANCE_COLUMNS, RunRow, ValueRow, Written


class StoreWrites(StoreCoordinates):
    """Writes runs and their values (every write one transaction) and sets a run's status."""

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

    def _write_points(self, cur: Any, run_key: int, chunks: Iterable[Sequence[PointGroup]]) -> int:
        """Write a night's values chunk by chunk, then its blocks; return how many values.

        :param chunks: the values in ordinal order, a chunk at a time (read once).
        """
        declarations: dict[tuple[str, str, str], int] = {}
        blocks: list[Block] = []
        written = 0
        covered: list[tuple[int, int]] = []
        for groups in chunks:
            rows, found = self._points_of(cur, run_key, groups, declarations)
            del groups
            covered = self._refuse_repeats(cur, covered, found)  # before the chunk is sent
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

    def _refuse_repeats(self, cur: Any, covered: list[tuple[int, int]],
                        blocks: Sequence[Block]) -> list[tuple[int, int]]:
        """Refuse a night that gives one coordinate two values, naming it; return what it covers with ``blocks``.

        On PostgreSQL nothing else keeps a run's values one per coordinate: the values' index is not
        unique (schema version 8).  Checked before each chunk is sent, against the chunks before it.

        :param covered: the coordinates of the chunks before, as :func:`cover` returns them.
        :param blocks: the chunk's blocks, in any order.
        """
        covered, repeated = cover(covered, blocks)
        if repeated is None:
            return covered
        self._execute(cur, "SELECT d.metric_key, d.steps_key, d.constraint_key, c.step FROM coordinates c "
                      "JOIN declarations d ON d.declaration = c.declaration WHERE c.coordinate = %s", (repeated,))
        metric_key, steps_key, constraint_key, step = cur.fetchone()
        raise StoreInputError(
            f"refusing to store two values of {metric_key} step {step} (steps {steps_key}, constraint "
            f"{constraint_key}) in one night: a night holds one value per metric, step and declaration; "
            "nothing was written"
        )

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


def _refuse_non_finite(value: float, metric_key: str, step: int) -> None:
    """Refuse a non-finite value before anything is written."""
    if not math.isfinite(value):
        raise StoreInputError(
            f"refusing to store non-finite value {value!r} for {metric_key} step {step}; nothing was written"
        )


def cover(covered: list[tuple[int, int]], blocks: Iterable[Block]) -> tuple[list[tuple[int, int]], int | None]:
    """Add blocks to the coordinates a night covers; return them, and a coordinate held twice (or ``None``).

    A night's coordinates are kept as the fewest ranges ``[start, end)`` in order: consecutive
    coordinates merge, so a night's chunks add up to a few ranges however its values were cut.

    :param covered: the ranges so far, in order, none touching another.
    :param blocks: ``(coordinate, ordinal, length, declaration)`` blocks to add, in any order.
    :return: the ranges with the blocks' added, and the first coordinate found twice (then the
        ranges are incomplete).
    """
    merged: list[tuple[int, int]] = []
    for start, end in heapq.merge(covered, sorted((c, c + n) for c, _, n, _ in blocks)):
        if merged and start < merged[-1][1]:
            return merged, start
        if merged and start == merged[-1][1]:
            merged[-1] = (merged[-1][0], end)
        else:
            merged.append((start, end))
    return merged, None


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
