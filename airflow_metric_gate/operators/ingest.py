"""Read and validate the nightly training record."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from airflow.sdk import BaseOperator
from airflow.sdk.exceptions import AirflowException, AirflowFailException

from airflow_metric_gate.enums import RecordFormat
from airflow_metric_gate.operators._record_copy import read_and_copy
from airflow_metric_gate.operators._shared import optional, upstream_value
from airflow_metric_gate.pipeline import ingest
from airflow_metric_gate.printable import printable
from airflow_metric_gate.records import RecordError
from airflow_metric_gate.storage import StorageUnavailable, record_path, refresh, storage_errors

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


def read_record_at(location: str, storage_conn_id: str | None, format: str, *, copy: bool = False) -> tuple[Any, Any]:
    """Read a record for an operator, with Airflow's retry semantics for failures.

    :param location: the record location: local path or object-storage URI.
    :param storage_conn_id: the Airflow connection of the object storage, if any.
    :param format: the record format.
    :param copy: keep a verified local copy of a record on object storage (see ``_record_copy``).
    :return: the record, and the local copy's digest (``None`` without a copy).
    :raises AirflowFailException: the location or the record is bad (never retried).
    :raises AirflowException: the storage could not be reached (retried).
    """
    try:
        with storage_errors(location):
            path = record_path(location, conn_id=optional(storage_conn_id))
            refresh(path)
            if copy:
                return read_and_copy(path, location, format=format)
            return ingest(path, format=format), None
    except RecordError as err:
        raise AirflowFailException(printable(f"bad training record {location}: {err}")) from err
    except StorageUnavailable as err:
        raise AirflowException(printable(f"{err}; will retry")) from err


class IngestRecordOperator(BaseOperator):
    """Read the nightly record and check its structure before anything is selected or stored.

    The record (a JSON Lines file, or a directory of them) is read from a local path or any Airflow
    object storage.  A malformed record fails the task without retries, naming file and line.
    Entries of a record directory that are not read (marker, hidden and temporary files,
    subdirectories) are logged one by one and counted in ``skipped``.
    The task's return value is a small summary for the next task, never the record itself::

        {"location": "s3://bucket/nightly/2026-11-30", "format": "series",
         "metrics": 7, "points": 5120, "files": 8, "skipped": 1, "copy": "<sha256>"}

    ``skipped`` counts the entries of a record directory that were skipped (each is logged).
    ``copy`` (records on object storage only) is the digest of the local copy kept for
    :class:`SelectStepsOperator`, so that the record is downloaded once per night.  Unreachable
    storage is retried (``AirflowException``).

    :param location: the record location: local path or object-storage URI; ``None`` takes it from
        the only upstream task's XCom (e.g. :class:`TrainingOutputSensor`) (templated).
    :param format: ``series`` (one line per metric) or ``rows`` (trainer-history lines) (templated).
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
            raise AirflowFailException(f"{self.task_id}: no record location given")
        problem = RecordFormat.problem(self.format, "format")
        if problem:
            raise AirflowFailException(problem)
        self.log.info("Reading training record %s (format %s)", location, self.format)
        record, copy = read_record_at(location, self.storage_conn_id, self.format, copy=True)
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
        }
        if copy is not None:
            summary["copy"] = copy
        self.log.info(
            "Record %s: %s metric(s), %s point(s) in %s file(s)",
            location,
            summary["metrics"],
            summary["points"],
            summary["files"],
        )
        return summary
