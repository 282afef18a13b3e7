"""Reading a record (SPEC section 2): :func:`read_record` and the reader of each format.

See also :mod:`airflow_metric_gate.records.files` (which files), :mod:`airflow_metric_gate.records.lines`
(JSON Lines) and :mod:`airflow_metric_gate.formats` (TensorBoard, CSV, MLflow).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from airflow_metric_gate.enums import RecordFormat
from airflow_metric_gate.memory import gc_paused
from airflow_metric_gate.records.files import _as_path, _data_files, _open_binary
from airflow_metric_gate.records.lines import _read_rows, _read_series
from airflow_metric_gate.records.model import RECORD_FORMATS, Columns, Point, Record, RecordError
from airflow_metric_gate.records.points import _Notes, _sort_by_step, add_log_points


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


def read_record(location: Any, *, format: str = "series") -> Record:
    """Read a record file, or merge a directory of record files.

    In a directory, files are read in sorted name order, skipping ``*.tmp`` files, names that
    start with ``.`` or ``_`` (such as the ``_SUCCESS`` completion marker) and subdirectories; the
    skipped entries are listed in :attr:`Record.skipped`.  A FIFO, socket or device, a broken
    symbolic link or a link loop (as the record or in its directory) is an error, found before
    anything is opened.  The points of a metric found in several files are concatenated, then
    stably sorted by step with ``null`` steps last; metrics keep first-seen order.  In one file a
    metric written on several lines (a resumed trainer) is merged by step, a later line's point
    replacing an earlier one at the same step (:func:`merge_lines`); a metric on one line keeps its
    points as written.  A record with no metric line is empty, not an error: every declaration
    then finds its metric absent.
    A step that is not an int >= 0 (``0.0``, ``-1``, ``"3"``, ``true``) makes its point
    step-less, like ``null``; such points are listed in :attr:`Record.invalid_steps`.

    Values ``"NaN"``, ``"Infinity"`` and ``"-Infinity"`` are decoded to floats; other values
    that are not numbers (booleans, null, other strings) are kept, for step selection to drop.
    Blank lines are skipped.

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
