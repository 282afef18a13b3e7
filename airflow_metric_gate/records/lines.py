"""Decoding the lines of a JSON Lines record (``series`` and ``rows``) into a metric's points.

Lines are decoded with msgspec, whose decoder gives what ``json.loads`` gives for every line it
accepts; a line it refuses (a ``NaN`` literal, a number beyond the float range, a lone surrogate,
invalid JSON) is decoded again by ``json.loads``, so the record means what the standard library
reads and every error is the one ``json.loads`` names.  A metric whose points are all plain (an
int step, a number as value) is kept as two columns, :class:`~airflow_metric_gate.records.model.Columns`.
See also :mod:`airflow_metric_gate.schemas.records`, the one definition of a valid line.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import msgspec
from marshmallow import ValidationError

from airflow_metric_gate.memory import gc_paused
from airflow_metric_gate.records.model import MAX_DROPPED_NOTES, Columns, Point, RecordError
from airflow_metric_gate.records.points import (
    _NUMBER_TYPES,
    _concatenate,
    _merge_parts,
    _note_dropped,
    _Notes,
    _rows_series,
)
from airflow_metric_gate.schemas.messages import format_errors
from airflow_metric_gate.schemas.records import (
    UnnamedMetric,
    decode_plain_series_line,
    decode_series_line,
    load_rows_line,
    load_series_line,
    may_hold_markers,
)


def _json_error(err: ValueError) -> str:
    """The message for a line ``json.loads`` refused, with the column (in characters) where it stopped.

    The decoded document is one record line with its line break: ``err.colno`` would count from that
    break when the line ends too early, so the column is taken from the position within the line.
    """
    if isinstance(err, json.JSONDecodeError):
        line = err.doc.rstrip("\r\n")
        if err.pos >= len(line):
            return f"not valid JSON: {err.msg} (column {len(line) + 1}, the end of the line)"
        return f"not valid JSON: {err.msg} (column {err.pos + 1})"
    return f"not valid JSON: {err}"


_decode_json = msgspec.json.Decoder().decode
#: What :func:`_load_line` returns for a blank line.
_BLANK = object()


def _parse_line(raw: bytes, name: str, lineno: int) -> Any:
    """Parse one line as ``json.loads`` parses it; ``_BLANK`` for a blank line; errors name file and line.

    msgspec's decoder goes first: for any line it accepts it gives what ``json.loads`` gives
    (``tests/unit/test_records_decoder.py`` pins this).  What it refuses, ``json.loads`` decides:
    it reads ``NaN`` and ``Infinity`` literals, numbers beyond the float range and lone surrogates
    as it always did, and its message is the error.
    """
    try:
        return _decode_json(raw)
    except (msgspec.DecodeError, RecursionError):
        pass
    try:
        return json.loads(raw)
    except ValueError as err:
        if not raw.strip():
            return _BLANK
        raise RecordError(_json_error(err), path=name, line=lineno) from None
    except RecursionError:
        raise RecordError(
            "not valid JSON: nested too deeply for the JSON parser (a record line nests 3 levels)",
            path=name, line=lineno,
        ) from None


def _load_line(raw: bytes, name: str, lineno: int, load_line: Any) -> Any:
    """Parse one line and validate it with ``load_line``; ``_BLANK`` for a blank line; errors name file and line."""
    obj = _parse_line(raw, name, lineno)
    if obj is _BLANK:
        return _BLANK
    try:
        return load_line(obj, may_hold_markers(raw))
    except ValidationError as err:
        raise RecordError(format_errors(err.messages), path=name, line=lineno) from None


def _plain_columns(raw: bytes, like: Columns | None) -> tuple[str, Columns] | None:
    """Decode a plain line (:func:`decode_plain_series_line`) into its metric and :class:`Columns`.

    :param like: the columns of the previous plain line (see :meth:`Columns.from_points`).
    """
    plain = decode_plain_series_line(raw)
    if plain is None:
        return None
    metric, points = plain
    return metric, Columns.from_points(points, like)


def _read_series(
    fh: Any,
    name: str,
    metrics: dict[str, list[Point] | Columns],
    notes: _Notes,
    pause_gc: Callable[[], None],
) -> None:
    by_metric: dict[str, list[list[Point] | Columns]] = {}
    lines_of: dict[str, list[int]] = {}
    last_plain: Columns | None = None  # metrics logged at the same steps share their step objects
    part: list[Point] | Columns
    invalid_steps = notes.invalid_steps
    for lineno, raw in enumerate(fh, 1):
        with gc_paused():  # the line's points are tuples until they become columns
            plain = _plain_columns(raw, last_plain)
        if plain is not None:
            metric, last_plain = plain
            part = last_plain
        else:
            pause_gc()  # this line's points are tuples
            loaded = decode_series_line(raw, may_hold_markers(raw))
            if loaded is not None:
                metric, part = loaded
            else:
                loaded = _load_line(raw, name, lineno, load_series_line)
                if loaded is _BLANK:
                    continue
                metric, part, invalid = loaded
                if type(metric) is UnnamedMetric:
                    notes.warn(f"{metric.describe()}: no gate can name this metric, so the line is not gated "
                               "(the reference gate reads it the same way)", name, lineno)
                    continue
                if invalid:
                    invalid_steps.setdefault(metric, []).extend((step, value, name, lineno) for step, value in invalid)
            if metric == "":
                notes.warn('the metric is named "" (empty): only a gate whose metric_key is "" gates it', name, lineno)
        parts = by_metric.get(metric)
        if parts is None:
            by_metric[metric] = [part]
            lines_of[metric] = [lineno]
        else:
            parts.append(part)
            lines_of[metric].append(lineno)
    for metric, parts in by_metric.items():
        if type(parts[-1]) is not Columns or len(parts) > 1:
            _note_dropped(notes, metric, name, lines_of[metric], parts)
        series = parts[0] if len(parts) == 1 else _merge_parts(parts)
        if len(parts) > 1:
            notes.last_lines[metric] = parts[-1]
        notes.files_of[metric] = notes.files_of.get(metric, 0) + 1
        existing = metrics.get(metric)
        metrics[metric] = series if existing is None else _concatenate(existing, series)


def _read_rows(
    fh: Any,
    name: str,
    metrics: dict[str, list[Point] | Columns],
    notes: _Notes,
    pause_gc: Callable[[], None],
) -> None:
    # Two lists per metric, no tuple per point: the collector is never paused for rows.
    steps_of: dict[str, list[int | None]] = {}
    values_of: dict[str, list[object]] = {}
    for lineno, raw in enumerate(fh, 1):
        loaded = _load_line(raw, name, lineno, load_rows_line)
        if loaded is _BLANK:
            continue
        step, values = loaded
        for metric, value in values:
            if type(value) not in _NUMBER_TYPES:
                notes.dropped_count[metric] = notes.dropped_count.get(metric, 0) + 1
                kept = notes.dropped.setdefault(metric, [])
                if len(kept) < MAX_DROPPED_NOTES:
                    kept.append((step, value, name, lineno))
            steps = steps_of.get(metric)
            if steps is None:
                steps_of[metric] = [step]
                values_of[metric] = [value]
            else:
                steps.append(step)
                values_of[metric].append(value)
    for metric, steps in steps_of.items():
        series = _rows_series(steps, values_of[metric])
        existing = metrics.get(metric)
        metrics[metric] = series if existing is None else _concatenate(existing, series)
