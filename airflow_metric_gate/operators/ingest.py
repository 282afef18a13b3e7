"""Read and validate the nightly training record."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from airflow_metric_gate.enums import RecordFormat
from airflow_metric_gate.formats.mlflow_run import pin_location, record_checksum
from airflow_metric_gate.operators._record_copy import RecordChanged, read_checked, read_pinned
from airflow_metric_gate.operators._shared import optional, upstream_value
from airflow_metric_gate.operators.base import MetricGateBaseOperator
from airflow_metric_gate.printable import printable
from airflow_metric_gate.records import Record, read_record
from airflow_metric_gate.storage import record_path, refresh, storage_errors

#: At most this many skipped entries of a record directory are logged one by one.
_SKIPS_LOGGED = 50

if TYPE_CHECKING:
    from airflow.sdk import Context


def record_location(value: Any) -> str | None:
    """Return the record location carried by an upstream XCom or a parameter.

    :param value: a location string (as :class:`TrainingOutputSensor` pushes it) or the mapping
        :class:`IngestRecordOperator` pushes (its ``location``).
    """
    if isinstance(value, dict):
        value = value.get("location")
    value = optional(value)
    return None if value is None else str(value)


def pinned_record(location: str, storage_conn_id: str | None, format: str, *, keep_copy: bool = True) -> tuple:
    """Read a record and its checksum (see ``_record_copy``), from a local path or object storage.

    :param location: the record location: local path or object-storage URI.
    :param storage_conn_id: the Airflow connection of the object storage, if any.
    :param format: the record format.
    :param keep_copy: keep a verified local copy of a record on object storage for the next task.
    :return: the record, its checksum, and whether a local copy was kept.
    :raises RecordError: the location or the record is bad.
    :raises StorageUnavailable: the storage could not be reached.
    """
    if format == RecordFormat.MLFLOW:  # a run, not files: pinned by a checksum of its points
        record = read_record(location, format=format)
        return record, record_checksum(record), False
    with storage_errors(location):
        path = record_path(location, conn_id=optional(storage_conn_id))
        refresh(path)
        return read_pinned(path, location, format=format, keep_copy=keep_copy)


def checked_record(location: str, storage_conn_id: str | None, format: str, checksum: str) -> tuple[Record, bool]:
    """Read a record again, checked against the checksum it was pinned by (a local copy first).

    :param location: the record location.
    :param storage_conn_id: the Airflow connection of the object storage, if any.
    :param format: the record format.
    :param checksum: the record's checksum when it was ingested.
    :return: the record, and whether it was read from the local copy ingest kept.
    :raises RecordChanged: the record changed since.
    :raises RecordError: the location or the record is bad.
    :raises StorageUnavailable: the storage could not be reached.
    """
    if format == RecordFormat.MLFLOW:
        record = read_record(location, format=format)
        found = record_checksum(record)
        if found != checksum:
            raise RecordChanged(location, checksum, found)
        return record, False
    with storage_errors(location):
        path = record_path(location, conn_id=optional(storage_conn_id))
        refresh(path)
        return read_checked(path, location, checksum, format=format)


class IngestRecordOperator(MetricGateBaseOperator):
    """Read the nightly record and check its structure before anything is selected or stored.

    The record (a JSON Lines file, or a directory of them; with ``format``, TensorBoard event files,
    CSV logs or an MLflow run) is read from a local path or any Airflow object storage (an MLflow
    run from its tracking server).  A malformed record fails the task without retries, naming file
    and line (or byte offset, or run).
    Entries of a record directory that are not read (marker, hidden and temporary files,
    subdirectories) are logged one by one and counted in ``skipped``.
    The task's return value is a small summary for the next task, never the record itself::

        {"location": "s3://bucket/nightly/2026-11-30", "format": "series",
         "metrics": 7, "points": 5120, "files": 8, "skipped": 1,
         "checksum": "<sha256>", "copy": true, "storage_conn_id": "aws_training"}

    ``skipped`` counts the entries of a record directory that were skipped (each is logged).
    ``checksum`` pins the record's bytes: :class:`PersistValuesOperator` reads the record again
    and refuses it if it changed.  ``copy`` (records on object storage only) says a verified local
    copy was kept on this machine, so that the record is downloaded once per night.
    ``storage_conn_id`` (only when given; a connection id, no secret) is carried on, so that the
    next tasks read the record with the same connection without being given it.  Unreachable
    storage is retried (``AirflowException``).

    :param location: the record location: local path or object-storage URI; ``None`` takes it from
        the only upstream task's XCom (e.g. :class:`TrainingOutputSensor`) (templated).
    :param format: ``series`` (one line per metric), ``rows`` (trainer-history lines), ``tensorboard``
        (event files), ``csv`` (a CSV log with a ``step`` column) or ``mlflow`` (``location`` names the
        run: ``runs:/<id>`` or ``experiments:/<name>?tag.<key>=<value>``) (templated).
    :param storage_conn_id: the Airflow connection of the object storage; ``None`` uses the default
        credentials or a connection named in the URI (templated).
    :param kwargs: passed to :class:`~airflow.sdk.BaseOperator`.
    """

    template_fields: Sequence[str] = ("location", "format", "storage_conn_id")
    ui_color = "#e8f0dc"

    def __init__(
        self,
        *,
        location: str | None = None,
        format: str = "series",
        storage_conn_id: str | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.location = location
        self.format = format
        self.storage_conn_id = storage_conn_id

    def execute(self, context: Context) -> dict[str, Any]:
        """Read the record and return its summary (pushed to XCom).

        :param context: the task context.
        """
        location = record_location(self.location)
        if location is None:
            location = record_location(upstream_value(self, context, "location"))
        if location is None:
            raise self.bad_input("no record location given")
        problem = RecordFormat.problem(self.format, "format")
        if problem:
            raise self.bad_input(problem)
        if self.format == RecordFormat.MLFLOW:  # the run found now is the one the next tasks read
            with self.core_errors(record=location):
                location = pin_location(location)
        self.log.info("Reading training record %s (format %s)", location, self.format)
        with self.core_errors(record=location):
            record, checksum, copy = pinned_record(location, self.storage_conn_id, self.format)
        for skipped, reason in record.skipped[:_SKIPS_LOGGED]:
            self.log.info("Skipped %s: %s", printable(skipped), reason)
        if len(record.skipped) > _SKIPS_LOGGED:
            self.log.info("... and %s more skipped entries", len(record.skipped) - _SKIPS_LOGGED)
        summary = {
            "location": location,
            "format": self.format,
            "metrics": len(record),
            "points": record.point_count(),
            "files": len(record.sources),
            "skipped": len(record.skipped),
            "checksum": checksum,
        }
        if copy:
            summary["copy"] = True
        storage_conn_id = optional(self.storage_conn_id)
        if storage_conn_id:  # a connection's id, never its secrets: the next tasks read the record with it
            summary["storage_conn_id"] = storage_conn_id
        self.log.info(
            "Record %s: %s metric(s), %s point(s) in %s file(s)",
            location,
            summary["metrics"],
            summary["points"],
            summary["files"],
        )
        return summary
