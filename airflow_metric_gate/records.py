"""Reading the nightly training record (SPEC section 2).

A record is JSON Lines, one file or a directory of files (one per training process).  Reading
streams line by line, validates each line against :mod:`airflow_metric_gate.schemas.records`
and merges everything into one :class:`Record`.  Any structural problem raises
:class:`RecordError` naming the file and the 1-based line, before anything is written anywhere.

Lines are decoded with msgspec, whose decoder gives what ``json.loads`` gives for every line it
accepts; a line it refuses (a ``NaN`` literal, a number beyond the float range, a lone surrogate,
invalid JSON) is decoded again by ``json.loads``, so the record means what the standard library
reads and every error is the one ``json.loads`` names.  A metric whose points are all plain (an
int step, a number as value) is kept as two columns, :class:`Columns`, not as one tuple per point.
"""

from __future__ import annotations

import errno
import json
import math
import os
import stat
from collections.abc import Callable, Iterator, Sequence
from operator import itemgetter, le, lt
from pathlib import Path
from typing import Any

import msgspec
from marshmallow import ValidationError

from airflow_metric_gate.enums import RecordFormat
from airflow_metric_gate.errors import LocatedError
from airflow_metric_gate.memory import gc_paused
from airflow_metric_gate.schemas.messages import format_errors
from airflow_metric_gate.schemas.records import (
    UnnamedMetric,
    decode_plain_series_line,
    decode_series_line,
    load_rows_line,
    load_series_line,
    may_hold_markers,
)

#: The record formats :func:`read_record` understands.
RECORD_FORMATS = RecordFormat.values()

Point = tuple[int | None, object]
#: A point whose step was not an int >= 0: ``(step as written, value, file, line)``; for an event
#: file or an MLflow run the position is a phrase such as ``"event record 3"``.
InvalidStep = tuple[object, object, str, int | str]
#: A point whose value is not a number (selection drops it): ``(step, value, file, line)``; for an
#: event file or an MLflow run the position is a phrase, as for :data:`InvalidStep`.
DroppedPoint = tuple[object, object, str, int | str]
#: At most this many dropped points of one metric are kept with their file and line (all are counted).
MAX_DROPPED_NOTES = 20
#: At most this many reading warnings are kept (all are counted in :attr:`Record.warning_count`).
MAX_READ_WARNINGS = 50


class RecordError(LocatedError):
    """A record cannot be read; the message names the file and line.

    :param message: what is wrong.
    :param path: the file (or location) concerned, if any.
    :param line: the 1-based line number, if any.
    """


class Columns:
    """A metric's points as two parallel lists: every step an int from 0 to 2**63 - 1, every value a finite float.

    Most metrics of a record look like this; keeping them as columns builds no object per point
    that outlives reading (so the garbage collector never walks them), and step selection takes its
    columns from here directly.

    :param steps: the steps, in point order.
    :param values: the values, parallel to ``steps``.
    :param distinct: ``True`` when the steps are known to be distinct; ``False`` says nothing.
    """

    __slots__ = ("steps", "values", "distinct")

    def __init__(self, steps: list[int], values: list[float], distinct: bool = False) -> None:
        self.steps = steps
        self.values = values
        self.distinct = distinct

    @classmethod
    def from_points(cls, points: list[tuple[int, float]], like: Columns | None = None) -> Columns:
        """Build columns from ``(step, value)`` points whose steps are ints and values finite floats.

        :param like: columns read before, typically another metric's: when their steps are the
            same, the new columns take a copy of that list (one int object per step for both)
            and its distinctness, instead of keeping the points' own step objects.
        :param points: the points, in order.
        """
        steps = list(map(_first, points))
        values = list(map(_second, points))
        if like is not None and like.steps == steps:
            return cls(like.steps.copy(), values, like.distinct)
        return cls(steps, values, len(set(steps)) == len(steps))

    def points(self) -> list[Point]:
        """The points as ``(step, value)`` tuples."""
        return list(zip(self.steps, self.values))

    def __len__(self) -> int:
        return len(self.steps)

    def __repr__(self) -> str:
        return f"Columns({len(self)} points)"


_first = itemgetter(0)
_second = itemgetter(1)


class Record:
    """The merged content of a record: every metric's points, in first-seen metric order.

    :param metrics: metric name -> its points: a list of ``(step, value)`` points, or
        :class:`Columns`.  A step is an int >= 0 or ``None``, a value is whatever the record held
        (numbers, non-finite floats, or non-numeric values that step selection drops); a number
        may come back as a float where the record wrote an integer.
    :param sources: the files read, in read order.
    :param skipped: the entries of a record directory that were not read, as ``(path, reason)``.
    :param invalid_steps: metric name -> its points whose step was not an int >= 0, as
        ``(step as written, value, file, line)``; they are among the metric's points with step
        ``None``, and step selection names them in the reasons they cause.
    :param dropped: metric name -> its points whose value is not a number (``null``, a boolean, a
        string other than the markers), as ``(step, value, file, line)``: the first
        :data:`MAX_DROPPED_NOTES` of each metric; selection drops them and reports them.  A point
        a later line replaced (same metric, same step, same file) is not among them.
    :param dropped_count: metric name -> how many such points it has in all.
    :param warnings: what reading accepted as the reference gate does but a user should hear
        about, each naming file and line (a line whose ``metric`` is not a string, which no
        declaration can gate; a metric named ``""``): the first :data:`MAX_READ_WARNINGS`.
    :param warning_count: how many warnings there were in all.
    :param last_lines: metric name -> the points of its last line, for a metric written on
        several lines of one file (a resumed trainer): ``steps: "last"`` gates the last point of
        that line, as the reference gate does, even when the line restarted at a lower step.
    """

    __slots__ = ("_series", "sources", "skipped", "invalid_steps", "dropped", "dropped_count", "warnings",
                 "warning_count", "last_lines")

    def __init__(
        self,
        metrics: dict[str, list[Point] | Columns] | None = None,
        sources: list[str] | None = None,
        skipped: list[tuple[str, str]] | None = None,
        invalid_steps: dict[str, list[InvalidStep]] | None = None,
        *,
        dropped: dict[str, list[DroppedPoint]] | None = None,
        dropped_count: dict[str, int] | None = None,
        warnings: list[str] | None = None,
        warning_count: int | None = None,
        last_lines: dict[str, list[Point] | Columns] | None = None,
    ) -> None:
        self._series: dict[str, list[Point] | Columns] = metrics if metrics is not None else {}
        self.sources: list[str] = sources if sources is not None else []
        self.skipped: list[tuple[str, str]] = skipped if skipped is not None else []
        self.invalid_steps: dict[str, list[InvalidStep]] = invalid_steps if invalid_steps is not None else {}
        self.dropped: dict[str, list[DroppedPoint]] = dropped if dropped is not None else {}
        self.dropped_count: dict[str, int] = (
            dropped_count if dropped_count is not None else {m: len(n) for m, n in self.dropped.items()}
        )
        self.warnings: list[str] = warnings if warnings is not None else []
        self.warning_count: int = warning_count if warning_count is not None else len(self.warnings)
        self.last_lines: dict[str, list[Point] | Columns] = last_lines if last_lines is not None else {}

    def last_line(self, metric: str) -> list[Point] | None:
        """The points of the metric's last line when it was written on several lines of one file, else ``None``.

        :param metric: a metric of the record.
        """
        part = self.last_lines.get(metric)
        if part is None:
            return None
        return part.points() if isinstance(part, Columns) else part

    @property
    def metrics(self) -> dict[str, list[Point]]:
        """Metric name -> ``(step, value)`` points, in first-seen metric order (a new dict on each call)."""
        return {metric: self[metric] for metric in self._series}

    def columns(self, metric: str) -> Columns | None:
        """The metric's points as :class:`Columns` when they were read as such, else ``None``.

        :param metric: a metric of the record.
        """
        series = self._series.get(metric)
        return series if type(series) is Columns else None

    def __contains__(self, metric: object) -> bool:
        return metric in self._series

    def __getitem__(self, metric: str) -> list[Point]:
        series = self._series[metric]
        return series.points() if isinstance(series, Columns) else series

    def __len__(self) -> int:
        return len(self._series)

    def __iter__(self) -> Iterator[str]:
        return iter(self._series)

    def point_count(self) -> int:
        """Return the number of points over all metrics."""
        return sum(map(len, self._series.values()))

    def __repr__(self) -> str:
        return f"Record({len(self)} metrics, {self.point_count()} points, {len(self.sources)} file(s))"


def is_data_file_name(name: str, format: str = "series") -> bool:
    """Return whether a file in a record directory holds record data.

    Temporary files (``*.tmp``) and names starting with ``.`` or ``_`` (such as a ``_SUCCESS``
    completion marker) are skipped; so are, in a ``tensorboard`` record, names without
    ``tfevents`` and, in a ``csv`` record, names not ending with ``.csv``.

    :param name: the file name.
    :param format: the record format.
    """
    return skip_reason(name, format) is None


def _as_path(location: Any) -> Any:
    """Turn a location into a pathlib-like object."""
    if location is None or (isinstance(location, str) and not location.strip()):
        raise RecordError("no record location given")
    if isinstance(location, str) and "://" in location:
        try:
            from upath import UPath
        except ImportError as err:  # pragma: no cover - universal_pathlib ships with Airflow
            raise RecordError(
                "reading a URI needs universal_pathlib; pass an ObjectStoragePath instead", path=location
            ) from err
        return UPath(location)
    if isinstance(location, (str, os.PathLike)) and not hasattr(location, "iterdir"):
        return Path(location)
    if not all(hasattr(location, attr) for attr in ("is_dir", "iterdir", "open")):
        raise RecordError(f"not a path: {location!r} (give a path, a URI or a pathlib-like object)")
    return location


#: Why a record directory entry named like a completion marker (``_SUCCESS``) is not read.
MARKER_SKIP = "marker file: the name starts with '_'"


def skip_reason(name: str, format: str = "series") -> str | None:
    """Return why a record directory entry is skipped by its name, or ``None`` when it is read.

    :param name: the file name.
    :param format: the record format: a ``tensorboard`` directory reads only event files (names
        holding ``tfevents``, as TensorBoard reads them), a ``csv`` directory only ``*.csv`` files.
    """
    if name.startswith("."):
        return "hidden file: the name starts with '.'"
    if name.startswith("_"):
        return MARKER_SKIP
    if name.endswith(".tmp"):
        return "temporary file: the name ends with '.tmp'"
    if format == RecordFormat.TENSORBOARD and "tfevents" not in name:
        return "not a TensorBoard event file: the name does not contain 'tfevents'"
    if format == RecordFormat.CSV and not name.lower().endswith(".csv"):
        return "not a CSV log: the name does not end with '.csv'"
    return None


_SPECIAL_KINDS = (
    (stat.S_ISFIFO, "a FIFO (named pipe)"),
    (stat.S_ISSOCK, "a socket"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
)


def _local_path(path: Any) -> Path | None:
    """The local file system path of ``path``, or ``None`` for object storage."""
    protocol = getattr(path, "protocol", None)
    if protocol is None:
        return path if isinstance(path, Path) else None
    if protocol in ("", "file", "local") and isinstance(getattr(path, "path", None), str):
        return Path(path.path)
    return None


def _local_kind(path: Path) -> str:
    """Classify a local path without opening it: ``file``, ``dir``, or raise naming what is wrong."""
    try:
        mode = path.stat().st_mode
    except FileNotFoundError:
        if path.is_symlink():
            raise RecordError("broken symbolic link: its target does not exist", path=str(path)) from None
        raise RecordError("no such file or directory", path=str(path)) from None
    except OSError as err:
        if err.errno == errno.ELOOP:
            raise RecordError("symbolic link loop: the link never reaches a file", path=str(path)) from None
        raise RecordError(f"cannot read: {err.strerror or err}", path=str(path)) from err
    if stat.S_ISREG(mode):
        return "file"
    if stat.S_ISDIR(mode):
        return "dir"
    kind = next((name for test, name in _SPECIAL_KINDS if test(mode)), "a special file")
    raise RecordError(f"not a regular file ({kind}); a record is a file or a directory of files", path=str(path))


def _data_files(path: Any, format: str = "series") -> tuple[list[Any], bool, list[tuple[str, str]]]:
    """Return the files to read, whether ``path`` is a directory, and the entries skipped.

    Local paths are classified with ``stat`` before anything is opened: FIFOs, sockets, devices,
    broken symbolic links and link loops are errors, in a directory too (a data file that cannot
    be read would leave the record incomplete).  Subdirectories and names skipped by
    :func:`skip_reason` are reported as skipped.
    """
    local = _local_path(path) is not None
    skipped: list[tuple[str, str]] = []
    try:
        if local:
            if _local_kind(_local_path(path)) == "file":  # type: ignore[arg-type]  # local: a Path
                return [path], False, skipped
        else:
            if not path.exists():
                raise RecordError("no such file or directory", path=str(path))
            if not path.is_dir():
                return [path], False, skipped
        children = []
        for child in path.iterdir():
            reason = skip_reason(child.name, format)
            if reason is None:
                if local:
                    kind = _local_kind(_local_path(child))  # type: ignore[arg-type]  # local: a Path
                else:
                    kind = "dir" if child.is_dir() else "file" if child.is_file() else ""
                if kind == "dir":
                    reason = "a directory: only the files directly inside the record directory are read"
                elif kind != "file":
                    reason = "neither a file nor a directory"
            if reason is None:
                children.append(child)
            else:
                skipped.append((str(child), reason))
    except OSError as err:
        raise RecordError(f"cannot read: {err}", path=str(path)) from err
    if not children:
        wanted_files: dict[str, str] = {
            RecordFormat.TENSORBOARD: "; only event files (names holding 'tfevents') are read",
            RecordFormat.CSV: "; only *.csv files are read",
        }
        wanted = wanted_files.get(format, "")
        raise RecordError(
            f"directory holds no record file (names starting with '.' or '_' and *.tmp files are skipped{wanted})",
            path=str(path),
        )
    skipped.sort()
    return sorted(children, key=lambda c: c.name), True, skipped


#: Read buffer for local record files: a ``series`` line holds a whole metric, often more than the
#: default 8 KiB, and a line longer than the buffer is read in many pieces.
_READ_BUFFER = 1 << 16


def _open_binary(file: Any) -> Any:
    """Open a record file for reading bytes; a local file with a larger buffer (:data:`_READ_BUFFER`)."""
    local = _local_path(file)
    if local is not None:
        return open(local, "rb", buffering=_READ_BUFFER)
    return file.open("rb")


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


def _plain_columns(raw: bytes, like: Columns | None) -> tuple[str, Columns] | None:
    """Decode a plain line (:func:`decode_plain_series_line`) into its metric and :class:`Columns`.

    :param like: the columns of the previous plain line (see :meth:`Columns.from_points`).
    """
    plain = decode_plain_series_line(raw)
    if plain is None:
        return None
    metric, points = plain
    return metric, Columns.from_points(points, like)


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


def _rows_series(steps: Sequence[int | None], values: list[object]) -> list[Point] | Columns:
    """One metric's points of a ``rows`` file: :class:`Columns` when they are plain, else tuples."""
    if None not in steps and set(map(type, values)) == _FLOAT_ONLY:
        # the values are floats and the steps ints, as the check above found: the types cannot say it
        total = sum(values)  # type: ignore[arg-type]  # floats
        if total - total == 0 or all(map(math.isfinite, values)):  # type: ignore[arg-type]  # floats
            return Columns(steps, values)  # type: ignore[arg-type]  # ints and floats
    return list(zip(steps, values))


_FLOAT_ONLY = {float}


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


def _read_event_file(
    fh: Any,
    name: str,
    metrics: dict[str, list[Point] | Columns],
    notes: _Notes,
    pause_gc: Callable[[], None],
) -> None:
    from airflow_metric_gate.formats.tensorboard import EventFileError, read_event_file, require_libraries

    try:
        require_libraries()
    except ImportError as err:
        raise RecordError(_missing_extra("tensorboard", err)) from None
    pause_gc()  # the file's values are tuples until they become columns
    try:
        per_metric = read_event_file(fh)
    except EventFileError as err:
        raise RecordError(str(err), path=name) from None
    add_log_points(per_metric, name, metrics, notes.invalid_steps)


def _read_csv(
    fh: Any,
    name: str,
    metrics: dict[str, list[Point] | Columns],
    notes: _Notes,
    pause_gc: Callable[[], None],
) -> None:
    from airflow_metric_gate.formats.csv_log import CsvLogError, read_csv_log

    try:
        per_metric = read_csv_log(fh)
    except CsvLogError as err:
        raise RecordError(str(err), path=name, line=err.line) from None
    add_log_points(per_metric, name, metrics, notes.invalid_steps, notes.dropped, notes.dropped_count)


def _missing_extra(extra: str, err: ImportError) -> str:
    return (
        f"the {extra} record format needs the {extra!r} extra: pip install 'airflow-metric-gate[{extra}]' "
        f"({err})"
    )


_FILE_READERS: dict[str, Callable[..., None]] = {
    "series": _read_series,
    "rows": _read_rows,
    "tensorboard": _read_event_file,
    "csv": _read_csv,
}


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


def read_record(location: Any, *, format: str = "series") -> Record:
    """Read a record file, or merge a directory of record files.

    In a directory, files are read in sorted name order, skipping ``*.tmp`` files, names that
    start with ``.`` or ``_`` (such as the ``_SUCCESS`` completion marker) and subdirectories; the
    skipped entries are listed in :attr:`Record.skipped`.  A FIFO, socket or device, a broken
    symbolic link or a link loop (as the record or in its directory) is an error, found before
    anything is opened.  The points of a
    metric found in several files are concatenated, then stably sorted by step with ``null``
    steps last; metrics keep first-seen order.  In one file a metric written on several lines (a
    resumed trainer) is merged by step, a later line's point replacing an earlier one at the same
    step (:func:`merge_lines`); a metric on one line keeps its points as written.  A record with
    no metric line is empty, not an error: every declaration then finds its metric absent.
    A step that is not an int >= 0 (``0.0``, ``-1``, ``"3"``, ``true``) makes its point
    step-less, like ``null``; such points are listed in :attr:`Record.invalid_steps`.

    Values ``"NaN"``, ``"Infinity"`` and ``"-Infinity"`` are decoded to floats; other values
    that are not numbers (booleans, null, other strings) are kept, for step selection to drop.
    Blank lines are skipped.

    :param location: a file or directory: a path, a URI string (read through universal_pathlib)
        or a pathlib-like object such as ``airflow.sdk.ObjectStoragePath``.
    The log formats read every point their files hold: ``tensorboard`` (a TensorBoard event file,
    or a run directory of them: one per writer, rank or restart), ``csv`` (a CSV log with a
    ``step`` column, such as Lightning's ``metrics.csv``, or a directory of them) and ``mlflow``
    (an MLflow run, ``location`` naming it: see :mod:`airflow_metric_gate.formats.mlflow_run`).  In
    one log file a metric logged again at a step replaces its earlier point there, as a later line
    does in a JSON Lines file; files of a directory merge as JSON Lines files do.

    :param location: a file or directory: a path, a URI string (read through universal_pathlib)
        or a pathlib-like object such as ``airflow.sdk.ObjectStoragePath``; for ``mlflow``, the run.
    :param format: ``"series"`` (one ``{"metric": ..., "series": [[step, value], ...]}`` line per
        metric), ``"rows"`` (one ``{"step": ..., "<metric>": value, ...}`` line per step),
        ``"tensorboard"``, ``"csv"`` or ``"mlflow"``.
    :raises RecordError: naming the file and line of the first problem (steps above 2**63 - 1
        and lines nested too deeply for the JSON parser included), the file and byte offset of a
        truncated or corrupted event file, or the MLflow run that is missing, running or failed.
    """
    if format == RecordFormat.MLFLOW:
        from airflow_metric_gate.formats.mlflow_run import read_run

        return read_run(location)
    read_lines = _FILE_READERS.get(format) if isinstance(format, str) else None
    if read_lines is None:
        raise RecordError(f"unknown record format {format!r} (expected one of: {', '.join(RECORD_FORMATS)})")
    path = _as_path(location)
    files, is_directory, skipped = _data_files(path, format)
    metrics: dict[str, list[Point] | Columns] = {}
    notes = _Notes()
    sources: list[str] = []
    with gc_paused(lazily=True) as pause_gc:
        for file in files:
            name = str(file)
            try:
                with _open_binary(file) as fh:
                    read_lines(fh, name, metrics, notes, pause_gc)
            except OSError as err:
                raise RecordError(f"cannot read: {err.strerror or err}", path=name) from err
            sources.append(name)
    if is_directory:
        for series in metrics.values():
            _sort_by_step(series)
    # a metric of several files is one concatenated series: "last" is its highest step there
    last_lines = {m: part for m, part in notes.last_lines.items() if notes.files_of.get(m, 0) == 1}
    return Record(metrics, sources, skipped, notes.invalid_steps, dropped=notes.dropped,
                  dropped_count=notes.dropped_count, warnings=notes.warnings, warning_count=notes.warning_count,
                  last_lines=last_lines)

