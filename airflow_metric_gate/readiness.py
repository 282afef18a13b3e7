"""Is a nightly training record ready to be gated, and if not, what is missing?

One check shared by :class:`~airflow_metric_gate.sensors.training_output.TrainingOutputSensor` (poke
and reschedule modes) and :class:`~airflow_metric_gate.triggers.training_output.TrainingOutputTrigger`
(deferrable mode), so that both wait for the same thing and explain a wait in the same words.
Nothing here imports Airflow: the check works on any pathlib-like object (``pathlib.Path``,
``airflow.sdk.ObjectStoragePath``, ``upath.UPath``) offering ``exists()``, ``is_dir()``,
``is_file()``, ``iterdir()``, ``stat()``, ``parent``, ``name`` and ``/``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from airflow_metric_gate.records import is_data_file_name
from airflow_metric_gate.storage import refresh

DEFAULT_MARKER = "_SUCCESS"
"""The completion marker a training job writes once its record is complete (the Hadoop/Spark habit)."""

MISSING_RECORD = "record"
MISSING_MARKER = "marker"
MISSING_DATA = "data"
MISSING_RUN = "run"
MISSING_FINISH = "finish"


@dataclass(frozen=True)
class Readiness:
    """The outcome of one readiness check.

    :param location: the record location that was checked, as a string (local path or URI).
    :param ready: whether the record can be ingested now.
    :param missing: what is missing when not ready: ``"record"`` (nothing at the location),
        ``"marker"`` (the completion marker is absent), ``"data"`` (the marker check is off and
        the record is empty), ``"run"`` (no MLflow run matches yet) or ``"finish"`` (the MLflow
        run is still running); ``None`` when ready.
    :param marker: the completion marker location that was looked for, or ``None`` when the
        marker check is off.
    :param reason: one sentence for logs and timeout messages.
    """

    location: str
    ready: bool
    missing: str | None
    marker: str | None
    reason: str


def validate_marker(marker: Any) -> None:
    """Reject a completion marker setting that cannot name a file.

    :param marker: ``None`` (check off) or a file name relative to the record directory, or to the
        directory holding a record file.
    :raises ValueError: the marker is not ``None`` or a non-empty relative name.
    """
    if marker is None:
        return
    if not isinstance(marker, str) or not marker.strip():
        raise ValueError(
            f"marker must be a file name such as {DEFAULT_MARKER!r}, or None to turn the completion "
            f"marker check off; got {marker!r}"
        )
    if marker.startswith("/") or "://" in marker:
        raise ValueError(
            f"marker must be relative to the record (directory, or the directory holding the record "
            f"file); got {marker!r}"
        )


def _has_data(path: Any, format: str) -> bool:
    if path.is_dir():
        return any(
            is_data_file_name(child.name, format) and child.is_file() and child.stat().st_size > 0
            for child in path.iterdir()
        )
    return path.stat().st_size > 0


def check_mlflow_run(location: str) -> Readiness:
    """Check whether the MLflow run a location names is complete: its status is ``FINISHED``.

    A run still ``RUNNING`` (or ``SCHEDULED``), or an ``experiments:/`` location no run matches
    yet, is not ready; a run that ended ``FAILED`` or ``KILLED`` is bad input.

    :param location: the run location (see :mod:`airflow_metric_gate.formats.mlflow_run`).
    :raises RecordError: the location is bad, the run does not exist or it failed.
    :raises StorageUnavailable: the tracking server could not be reached.
    """
    from airflow_metric_gate.formats.mlflow_run import find_run, parse_location, run_location, run_problem

    where = parse_location(location)
    run = find_run(where)
    ready, reason = run_problem(where, run)
    if ready:
        return Readiness(run_location(where, run.info.run_id), True, None, None, reason)
    return Readiness(location, False, MISSING_RUN if run is None else MISSING_FINISH, None, reason)


def check_record(path: Any, *, marker: str | None = DEFAULT_MARKER, format: str = "series") -> Readiness:
    """Check whether the record at ``path`` exists and is complete.

    With a marker, the record is complete when the marker exists: inside the record when the
    record is a directory, beside it when the record is a file.  With ``marker=None`` the record
    only has to be non-empty: a non-empty file, or a directory holding at least one non-empty
    record file (for ``tensorboard``, an event file; for ``csv``, a ``*.csv`` file).  For an
    ``mlflow`` record use :func:`check_mlflow_run`.

    :param path: the record location as a pathlib-like object.
    :param marker: the completion marker's file name, or ``None`` to require only a non-empty record.
    :param format: the record format (a file-based one).
    :raises ValueError: ``marker`` is not a usable file name (see :func:`validate_marker`).
    :raises OSError: the storage could not be read (permissions, network); not a reason to wait.
    """
    validate_marker(marker)
    refresh(path)
    location = str(path)
    is_dir = path.is_dir()
    marker_path = None
    if marker is not None:
        marker_path = (path if is_dir else path.parent) / marker
    marker_location = None if marker_path is None else str(marker_path)

    if not is_dir and not path.exists():
        reason = f"the record {location} does not exist"
        if marker_path is not None and marker_path.exists():
            reason += f" although the completion marker {marker_location} does; is the record path right?"
        return Readiness(location, False, MISSING_RECORD, marker_location, reason)

    if marker_path is not None:
        if not marker_path.exists():
            kind = "directory" if is_dir else "file"
            reason = (
                f"the record {kind} {location} exists but its completion marker {marker_location} does "
                "not: the training job has not finished writing it"
            )
            return Readiness(location, False, MISSING_MARKER, marker_location, reason)
        return Readiness(location, True, None, marker_location, f"the record {location} is complete")

    if not _has_data(path, format):
        if is_dir:
            reason = f"the record directory {location} holds no non-empty record file (marker check off)"
        else:
            reason = f"the record file {location} is empty (marker check off)"
        return Readiness(location, False, MISSING_DATA, None, reason)
    return Readiness(location, True, None, None, f"the record {location} is present and non-empty")
