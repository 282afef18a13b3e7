"""Reading a night's values and the baselines of its coordinates, in bounded chunks.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any

import numpy as np

from airflow_metric_gate.chunking import chunk_points
from airflow_metric_gate.step_values import StepIndex, StepValues
from airflow_metric_gate.store.core import _KEY_BATCH, StoreCore
from airflow_metric_gate.store.points import Ordinals, read_at_step
from airflow_metric_gate.store.rows import ValueRow
from airflow_metric_gate.store.sql import (
    BASELINE_RUNS_SQL,
    RANGE_PARAMS,
    baseline_params,
    baseline_sql,
    float8_values,
    in_ranges,
    joined_ranges,
    night_arrays_params,
    night_arrays_sql,
    ranges_params,
    run_values_sql,
)


class StoreValueReads(StoreCore):
    """Reads the values of a night and the history of each of its coordinates."""

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
                arrays = self._value_arrays
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
    ) -> Iterator[tuple[tuple[str, str, str], int, int | None, float, int, list[float]]]:
        """Yield a run's values with their baselines, in ordinal order, read chunk by chunk.

        The same values and baselines as :meth:`run_values_and_baselines`, in one transaction, but
        at most ``chunk`` coordinates are read and held at a time: one statement per chunk reads
        their values, another their baselines (each baseline run's rows of those coordinates only,
        through the values' index by run and coordinate group).  Each value comes as
        ``(declaration key, step, at_step, value, ordinal, baseline)``, the shape
        :func:`~airflow_metric_gate.judging.judge_run` takes; the values of one declaration share
        one key tuple.

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
            arrays = self._value_arrays
            most = self._ranges_per_chunk(len(base))
            for ranges in _chunk_ranges(ordinals, chunk, most):
                bounds = joined_ranges((lo, hi) for lo, hi, _ in ranges)
                steps: dict[int, int] = {}
                for lo, hi, declaration in ranges:
                    self._execute(cur, "SELECT coordinate, step FROM coordinates WHERE declaration = %s "
                                  "AND coordinate BETWEEN %s AND %s", (declaration, lo, hi))
                    steps.update(cur.fetchall())
                self._execute(cur, "SELECT coordinate, value, at_step FROM metric_points WHERE run_key = %s"
                              + in_ranges("coordinate", len(bounds)) + " ORDER BY coordinate",
                              [run_key, *ranges_params(bounds)])
                # each range lies in one block, where ordinals follow coordinates: the rows of each
                # range in coordinate order, the ranges in ordinal order, are the values in ordinal order
                by_range = _rows_by_range(cur.fetchall(), ranges)
                history: dict[int, list[float]] = {}
                if base:
                    self._plan_bulk_join(cur)
                    if arrays:  # each baseline run's values as one array, turned into each coordinate's list
                        history = self._baselines_by_run(cur, base, run_key, bounds, sorted(steps))
                    else:
                        self._execute(cur, baseline_sql(len(base), ranges=len(bounds)),
                                      baseline_params(base, run_key, bounds))
                        history = _group_by_ordinal(cur.fetchall())  # grouped by coordinate here
                    self._plan_bulk_join(cur, on=False)
                no_values: list[float] = []
                for (lo, _, declaration), rows in zip(ranges, by_range):
                    key = keys[declaration]
                    offset = ordinals.ordinal(lo) - lo
                    for coordinate, value, at_step in rows:
                        step = steps[coordinate]
                        yield (key, step, read_at_step(step, at_step), value, coordinate + offset,
                               history.get(coordinate, no_values))

    def _baselines_by_run(self, cur: Any, base: list[int], run_key: int, bounds: list[tuple[int, int]],
                          coordinates: list[int]) -> dict[int, list[float]]:
        """Return each coordinate's values in the baseline runs (PostgreSQL), read one array per run.

        :param base: the baseline runs' keys.
        :param run_key: the run's key.
        :param bounds: the chunk's coordinate ranges (the run's blocks).
        :param coordinates: the run's coordinates in them, in order.
        """
        whole, parts = self._runs_in_ranges(cur, base, run_key, bounds, len(coordinates))
        if whole:  # nights x coordinates, read by coordinate: one list per coordinate in one call
            matrix = np.vstack([values for _, values in whole])
            del whole  # the nights' own arrays are in the matrix now
            lists = matrix.T.tolist()
            del matrix
        else:
            lists = [[] for _ in coordinates]
        if parts:
            at = {coordinate: i for i, coordinate in enumerate(coordinates)}
            for _, found, values in parts:
                for coordinate, value in zip(found, values):
                    lists[at[coordinate]].append(value)
        return dict(zip(coordinates, lists))

    def _ranges_per_chunk(self, other_runs: int) -> int:
        """How many coordinate ranges a chunk's statements bind, with ``other_runs`` branches besides the run's.

        Every range binds :data:`~airflow_metric_gate.store.sql.RANGE_PARAMS` parameters in each
        branch, besides the branch's run: a chunk's statement stays below :attr:`max_parameters`.
        """
        return max(1, min(_RANGES_PER_CHUNK, (self.max_parameters // (other_runs + 1) - 1) // RANGE_PARAMS))

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
    ) -> tuple[list[tuple[int, int | None, float, int]], dict[str, Mapping[int, float]]]:
        """Return one declaration's values in a run, and its values in some other runs, in one transaction.

        What :meth:`run_values` and :meth:`values_in_runs` read, for one declaration's coordinates
        only (read through their index ranges): a night judged declaration by declaration holds one
        declaration's values and history at a time.  The other runs' values come in the shape the
        calibrated policy judges them in: by run, then by step (each coordinate's step is the one
        the run's own row gives it, so no ordinal is worked out per value).  On PostgreSQL a run
        that has every one of the declaration's coordinates (the usual night) comes as one array
        in coordinate order (:class:`~airflow_metric_gate.step_values.StepValues`, its steps shared
        by every such run); a run that lacks some, as a ``dict``.

        :param run_id: the store run id.
        :param key: the declaration's ``(metric_key, steps_key, constraint_key)``.
        :param run_ids: the other runs.
        :return: the values in ordinal order, ``(step, at_step, value, ordinal)`` each (the shape
            :func:`~airflow_metric_gate.judging.judge_calibrated` takes), and each other run's values
            by step (a run with none of the declaration's coordinates is left out).
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
            current: list[tuple[int, int | None, float, int]] = []
            # one dict per other run, by its position among ``others`` (the statement's ``k``), for the
            # values not read as whole arrays; and each run's whole arrays, chunk by chunk
            by_position: list[dict[int, float]] = [{} for _ in others]
            blocks = _Blocks(len(others))
            for ranges in _chunk_ranges(ordinals, len(ordinals), most):
                bounds = joined_ranges((lo, hi) for lo, hi, _ in ranges)
                self._execute(cur, "SELECT p.coordinate, c.step, p.value, p.at_step FROM metric_points p "
                              "JOIN coordinates c ON c.coordinate = p.coordinate "
                              "WHERE p.run_key = %s AND c.declaration = %s" + in_ranges("p.coordinate", len(bounds)),
                              [run_key, declaration, *ranges_params(bounds)])
                fetched = cur.fetchall()
                ordinal = ordinals.ordinal
                current += [(step, read_at_step(step, at), value, ordinal(coordinate))
                            for coordinate, step, value, at in fetched]
                if others:
                    step_of = {int(coordinate): int(step) for coordinate, step, _, _ in fetched}
                    self._plan_bulk_join(cur)
                    if self._value_arrays:
                        self._night_arrays(cur, others, run_key, bounds, step_of, by_position, blocks)
                    else:
                        self._execute(cur, run_values_sql(len(others), ranges=len(bounds)),
                                      baseline_params([k for _, k in others], run_key, bounds))
                        for coordinate, k, value in cur.fetchall():
                            by_position[k][step_of[coordinate]] = value
                    self._plan_bulk_join(cur, on=False)
                del fetched
        current.sort(key=_fourth)
        nights = blocks.nights(by_position)
        return current, {names[i]: values for (i, _), values in zip(others, nights) if values}


    def _night_arrays(self, cur: Any, others: list[tuple[int, int]], run_key: int, bounds: list[tuple[int, int]],
                      step_of: dict[int, int], by_position: list[dict[int, float]], blocks: _Blocks) -> None:
        """Read the other runs' values of some coordinate ranges as one array per run (PostgreSQL).

        A run with every one of the run's coordinates in the ranges (the usual night) sends its
        values alone, in coordinate order, and they pair with those coordinates' steps in order; a
        run that lacks some is read again with its coordinates.  The ranges are the run's blocks, so
        every coordinate in them is one of the run's.

        :param others: ``(position, run_key)`` of the other runs.
        :param run_key: the run's key.
        :param bounds: the coordinate ranges.
        :param step_of: the run's coordinates in the ranges -> their steps.
        :param by_position: each other run's values by step, by position: the runs that lack some coordinates'.
        :param blocks: each other run's whole arrays: the runs that have them all.
        """
        steps = [step_of[c] for c in sorted(step_of)]
        blocks.start(steps)
        whole, parts = self._runs_in_ranges(cur, [k for _, k in others], run_key, bounds, len(steps))
        for k, array in whole:
            blocks.add(k, array)
        for k, coordinates, values in parts:
            by_position[k].update(zip(map(step_of.__getitem__, coordinates), values))

    def _runs_in_ranges(self, cur: Any, run_keys: list[int], run_key: int, bounds: list[tuple[int, int]],
                        count: int) -> tuple[list[tuple[int, np.ndarray]], list[tuple[int, list[int], list[float]]]]:
        """Read other runs' values of some coordinate ranges of a run, one array per run (PostgreSQL).

        A run with every one of the run's coordinates in the ranges (the usual night) sends its
        values alone, in coordinate order; a run that lacks some is read again with its
        coordinates.  The ranges are the run's blocks, so every coordinate in them is one of the run's.

        :param run_keys: the other runs' keys.
        :param run_key: the run's key.
        :param bounds: the coordinate ranges.
        :param count: how many of the run's coordinates the ranges hold.
        :return: ``(position, values)`` of each run with all of them, in coordinate order, and
            ``(position, coordinates, values)`` of each run with some; a run with none is left out
            (positions index ``run_keys``).
        """
        self._plan_serial(cur)
        self._execute(cur, night_arrays_sql(len(run_keys), len(bounds)), night_arrays_params(run_keys, bounds))
        whole: list[tuple[int, np.ndarray]] = []
        partial = []
        for k, found, values in iter(cur.fetchone, None):  # row by row: each night's bytes let go once read
            # the same coordinates (one value per coordinate and run): in order
            if found == count and values is not None:
                whole.append((k, float8_values(values)))
            elif found:
                partial.append(k)
            del values
        if not partial:
            return whole, []
        self._execute(cur, run_values_sql(len(partial), ranges=len(bounds), by_run=True),
                      baseline_params([run_keys[k] for k in partial], run_key, bounds))
        return whole, [(partial[i], coordinates, values) for i, coordinates, values in cur.fetchall()]


class _Blocks:
    """The other runs' values read as whole arrays, chunk by chunk (:meth:`StoreValueReads.declaration_night`).

    :param runs: how many other runs.
    """

    def __init__(self, runs: int) -> None:
        self.steps: list[list[int]] = []
        self.arrays: list[list[tuple[int, Any]]] = [[] for _ in range(runs)]

    def start(self, steps: list[int]) -> None:
        """Begin a chunk whose coordinates have these steps, in coordinate order."""
        self.steps.append(steps)

    def add(self, k: int, values: Any) -> None:
        """Take run ``k``'s values of the chunk, one per step of :meth:`start`, in order."""
        self.arrays[k].append((len(self.steps) - 1, values))

    def nights(self, by_position: list[dict[int, float]]) -> list[Mapping[int, float]]:
        """Return each run's values by step: one array when it has every chunk whole, else a ``dict``.

        :param by_position: each run's values read otherwise (a run lacking some coordinates).
        """
        if not self.steps:
            return list(by_position)
        whole = [step for steps in self.steps for step in steps]
        index: StepIndex | None = None
        out: list[Mapping[int, float]] = []
        for k, parts in enumerate(self.arrays):
            if len(parts) == len(self.steps) and not by_position[k]:
                if index is None:
                    index = StepIndex(whole)
                values = parts[0][1] if len(parts) == 1 else np.concatenate([array for _, array in parts])
                out.append(StepValues(index, values))
                continue
            night = by_position[k]
            for chunk, array in parts:
                night.update(zip(self.steps[chunk], array.tolist()))
            out.append(night)
        self.arrays = []
        return out


#: At most this many coordinate ranges in one chunk's statements (see :func:`_chunk_ranges`).
_RANGES_PER_CHUNK = 64


def _first(item: tuple) -> Any:
    return item[0]


def _rows_by_range(rows: list[tuple], ranges: Sequence[tuple[int, int, int]]) -> list[list[tuple]]:
    """Split rows ordered by coordinate (their first field) among the coordinate ranges that hold them.

    :param rows: the rows, in coordinate order.
    :param ranges: ``(lowest, highest, declaration)``, not overlapping, in any order.
    :return: each range's rows, in the order of ``ranges``.
    """
    out: list[list[tuple]] = [[] for _ in ranges]
    starts = sorted((lo, i) for i, (lo, _, _) in enumerate(ranges))
    firsts = [lo for lo, _ in starts]
    for k, (lo, i) in enumerate(starts):
        begin = bisect_left(rows, lo, key=_first)
        end = bisect_left(rows, firsts[k + 1], key=_first) if k + 1 < len(starts) else len(rows)
        out[i] = rows[begin:end]
    return out


def _fourth(item: tuple) -> Any:
    return item[3]


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


def _group_by_ordinal(rows: Iterable[tuple[int, float]]) -> dict[int, list[float]]:
    history: dict[int, list[float]] = {}
    for ordinal, value in rows:
        values = history.get(ordinal)
        if values is None:
            history[ordinal] = [value]
        else:
            values.append(value)
    return history
