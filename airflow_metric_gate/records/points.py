"""Merging a record's points: a metric's lines in one file, its files in a directory, and notes of dropped points.

SPEC 2: in one file a later line's point replaces an earlier one at the same step; the files of a
directory concatenate, then sort by step.  See also :mod:`airflow_metric_gate.records.lines`,
which decodes the lines.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from operator import itemgetter, le, lt

from airflow_metric_gate.errors import LocatedError
from airflow_metric_gate.records.model import (
    MAX_DROPPED_NOTES,
    MAX_READ_WARNINGS,
    Columns,
    DroppedPoint,
    InvalidStep,
    Point,
    _second,
)


def merge_lines(parts: list[list[Point]]) -> list[Point]:
    """Merge the lines of one metric written several times in one file (a resumed trainer).

    A later line's points replace the earlier points at the same steps; stepped points are then
    ordered by step (stably: the points of one line keep their order), and step-less points
    follow in line order (SPEC 2).

    :param parts: the metric's points, one list per line, in line order.
    """
    merged = list(parts[0])
    for part in parts[1:]:
        replaced = {step for step, _ in part if step is not None}
        if replaced:
            merged = [p for p in merged if p[0] is None or p[0] not in replaced]
        merged.extend(part)
    stepped = [p for p in merged if p[0] is not None]
    stepped.sort(key=itemgetter(0))
    return stepped + [p for p in merged if p[0] is None]


def _as_points(series: list[Point] | Columns) -> list[Point]:
    return series.points() if isinstance(series, Columns) else series


def _merge_parts(parts: list[list[Point] | Columns]) -> list[Point] | Columns:
    """:func:`merge_lines` over a metric's lines; columns again when every line was columns."""
    merged = merge_lines([_as_points(part) for part in parts])
    if all(type(part) is Columns for part in parts):
        return Columns.from_points(merged)  # type: ignore[arg-type]  # columns' points: int steps, float values
    return merged


def _concatenate(first: list[Point] | Columns, then: list[Point] | Columns) -> list[Point] | Columns:
    """Append a later file's points of a metric to the earlier files' (both built by this read)."""
    if type(first) is Columns and type(then) is Columns:
        first.steps.extend(then.steps)
        first.values.extend(then.values)
        first.distinct = False
        return first
    points = _as_points(first)
    points.extend(_as_points(then))
    return points


class _Notes:
    """What reading a record notes besides its points: dropped values, warnings, last lines."""

    __slots__ = ("invalid_steps", "dropped", "dropped_count", "warnings", "warning_count", "last_lines",
                 "files_of")

    def __init__(self) -> None:
        self.invalid_steps: dict[str, list[InvalidStep]] = {}
        self.dropped: dict[str, list[DroppedPoint]] = {}
        self.dropped_count: dict[str, int] = {}
        self.warnings: list[str] = []
        self.warning_count = 0
        self.last_lines: dict[str, list[Point] | Columns] = {}
        self.files_of: dict[str, int] = {}  # metric -> how many files hold it

    def warn(self, message: str, path: str, line: int) -> None:
        self.warning_count += 1
        if len(self.warnings) < MAX_READ_WARNINGS:
            self.warnings.append(str(LocatedError(message, path=path, line=line)))


_NUMBER_TYPES = {float, int}


def _non_numeric(part: list[Point] | Columns) -> list[Point]:
    """The points of one line whose value is not a number (bools are not numbers)."""
    if isinstance(part, Columns):
        return []
    kinds = set(map(type, map(_second, part)))
    if kinds <= _NUMBER_TYPES:
        return []
    return [p for p in part if type(p[1]) not in _NUMBER_TYPES]


def _note_dropped(
    notes: _Notes, metric: str, name: str, lines: list[int], parts: list[list[Point] | Columns]
) -> None:
    """Note the non-numeric points of one file's lines of a metric, but those a later line replaced."""
    later_steps: set[object] = set()
    found: list[DroppedPoint] = []
    for lineno, part in zip(reversed(lines), reversed(parts)):
        for step, value in reversed(_non_numeric(part)):
            if step is None or step not in later_steps:
                found.append((step, value, name, lineno))
        if len(parts) > 1:
            later_steps.update(step for step, _ in _as_points(part) if step is not None)
    if not found:
        return
    found.reverse()
    notes.dropped_count[metric] = notes.dropped_count.get(metric, 0) + len(found)
    kept = notes.dropped.setdefault(metric, [])
    kept.extend(found[: max(MAX_DROPPED_NOTES - len(kept), 0)])


def _rows_series(steps: Sequence[int | None], values: list[object]) -> list[Point] | Columns:
    """One metric's points of a ``rows`` file: :class:`Columns` when they are plain, else tuples."""
    if None not in steps and set(map(type, values)) == _FLOAT_ONLY:
        # the values are floats and the steps ints, as the check above found: the types cannot say it
        total = sum(values)  # type: ignore[arg-type]  # floats
        if total - total == 0 or all(map(math.isfinite, values)):  # type: ignore[arg-type]  # floats
            return Columns(steps, values)  # type: ignore[arg-type]  # ints and floats
    return list(zip(steps, values))


_FLOAT_ONLY = {float}


def _file_series(steps: list[int | None], values: list[object]) -> list[Point] | Columns:
    """One metric's points read from one log file, merged as SPEC 2 merges a metric's lines in one file.

    Each logged point counts as a line: a later point replaces an earlier one at the same step,
    stepped points are ordered by step and step-less points follow in log order.  Steps logged
    in increasing order (the common case) are kept as they are.
    """
    if None not in steps and all(map(lt, steps, steps[1:])):  # type: ignore[arg-type]  # no None: ints compare
        return _rows_series(steps, values)
    latest: dict[int, object] = {}
    stepless: list[Point] = []
    for step, value in zip(steps, values):
        if step is None:
            stepless.append((None, value))
        else:
            latest.pop(step, None)
            latest[step] = value
    ordered = sorted(latest)
    series = _rows_series(ordered, [latest[step] for step in ordered])
    if not stepless:
        return series
    return _as_points(series) + stepless


def add_log_points(
    per_metric: dict[str, tuple[list, list, list, list]],
    name: str,
    metrics: dict[str, list[Point] | Columns],
    invalid_steps: dict[str, list[InvalidStep]],
    dropped: dict[str, list[DroppedPoint]] | None = None,
    dropped_count: dict[str, int] | None = None,
) -> None:
    """Add the points a log reader found in one file (or run) to the record read so far (files concatenate).

    :param per_metric: metric -> ``(steps, values, invalid, dropped)`` as the readers of
        :mod:`airflow_metric_gate.formats` return them.
    :param name: the file (or run) read, for :attr:`Record.invalid_steps` and :attr:`Record.dropped`.
    :param metrics: the record's metrics so far, extended in place.
    :param invalid_steps: the record's invalid steps so far, extended in place.
    :param dropped: the record's notes of points whose value is not a number, extended in place
        (those a later point at the same step replaced are not noted); ``None``: not kept.
    :param dropped_count: how many such points each metric has in all, counted in place.
    """
    for metric, (steps, values, invalid, not_numbers) in per_metric.items():
        if invalid:
            invalid_steps.setdefault(metric, []).extend((step, value, name, at) for step, value, at in invalid)
        series = _file_series(steps, values)
        if not_numbers and dropped is not None and dropped_count is not None:
            kept = {id(value) for _, value in _as_points(series)}
            found = [(step, value, name, at) for step, value, at in not_numbers if id(value) in kept]
            if found:
                dropped_count[metric] = dropped_count.get(metric, 0) + len(found)
                notes = dropped.setdefault(metric, [])
                notes.extend(found[: max(MAX_DROPPED_NOTES - len(notes), 0)])
        existing = metrics.get(metric)
        metrics[metric] = series if existing is None else _concatenate(existing, series)


def _sort_by_step(series: list[Point] | Columns) -> None:
    """Stable sort by step, ``None`` steps last."""
    if isinstance(series, Columns):
        steps = series.steps
        if not all(map(le, steps, steps[1:])):
            order = sorted(range(len(steps)), key=steps.__getitem__)
            series.steps = list(map(steps.__getitem__, order))
            series.values = list(map(series.values.__getitem__, order))  # distinctness unchanged
        return
    try:
        series.sort(key=itemgetter(0))
    except TypeError:  # some steps are None
        series.sort(key=lambda p: (p[0] is None, p[0] or 0))
