"""The trigger behind the deferrable mode of ``TrainingOutputSensor``."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from typing import Any

from airflow.sdk import ObjectStoragePath
from airflow.triggers.base import BaseTrigger, TriggerEvent

from airflow_metric_gate.enums import RecordFormat
from airflow_metric_gate.errors import BadInputError
from airflow_metric_gate.readiness import DEFAULT_MARKER, Readiness, check_mlflow_run, check_record


def check_location(
    location: str, *, marker: str | None, storage_conn_id: str | None, format: str = "series"
) -> Readiness:
    """Check a record given by location string (local path or object-storage URI, or an MLflow run).

    :param location: a local path or an Airflow object-storage URI (``file://``, ``s3://``, ...);
        for the ``mlflow`` format, the run (``runs:/<id>``, ``experiments:/<name>?tag.<k>=<v>``).
    :param marker: the completion marker's file name, or ``None`` to require only a non-empty record
        (not used for ``mlflow``: a run is complete when it is FINISHED).
    :param storage_conn_id: the Airflow connection of the object storage, or ``None`` for the
        default credentials (or a connection named in the URI, ``s3://conn_id@bucket/key``).
    :param format: the record format.
    :raises RecordError: bad input (an MLflow run that does not exist, failed or was killed).
    """
    if format == RecordFormat.MLFLOW:
        return check_mlflow_run(location)
    return check_record(ObjectStoragePath(location, conn_id=storage_conn_id), marker=marker, format=format)


class TrainingOutputTrigger(BaseTrigger):
    """Poll a training record until it is complete, then fire one event.

    The event payload is ``{"status": "success", "location": ...}`` when the record is complete,
    ``{"status": "timeout", "location": ..., "missing": ..., "message": ...}`` when ``deadline``
    passes first, ``{"status": "bad_input", "location": ..., "message": ...}`` when the record can
    never be complete (an MLflow run that failed or does not exist), and
    ``{"status": "error", "location": ..., "message": ...}`` when the storage cannot be read.

    :param location: the record location: local path or object-storage URI.
    :param marker: the completion marker's file name, or ``None`` to require only a non-empty record.
    :param storage_conn_id: the Airflow connection of the object storage, if any.
    :param poke_interval: seconds between two checks.
    :param deadline: when to give up, as a POSIX timestamp (seconds); ``None`` waits forever.
    :param format: the record format (``mlflow`` waits for the run to be FINISHED).
    """

    def __init__(
        self,
        *,
        location: str,
        marker: str | None = DEFAULT_MARKER,
        storage_conn_id: str | None = None,
        poke_interval: float = 60.0,
        deadline: float | None = None,
        format: str = "series",
    ) -> None:
        super().__init__()
        self.location = location
        self.marker = marker
        self.storage_conn_id = storage_conn_id
        self.poke_interval = poke_interval
        self.deadline = deadline
        self.format = format

    def serialize(self) -> tuple[str, dict[str, Any]]:
        """Return the dotted class path and the primitive keyword arguments that rebuild this trigger."""
        return (
            f"{type(self).__module__}.{type(self).__qualname__}",
            {
                "location": self.location,
                "marker": self.marker,
                "storage_conn_id": self.storage_conn_id,
                "poke_interval": self.poke_interval,
                "deadline": self.deadline,
                "format": self.format,
            },
        )

    async def run(self) -> AsyncIterator[TriggerEvent]:
        """Check the record every ``poke_interval`` seconds; yield exactly one event."""
        while True:
            try:
                readiness = await asyncio.to_thread(
                    check_location, self.location, marker=self.marker, storage_conn_id=self.storage_conn_id,
                    format=self.format,
                )
            except BadInputError as err:  # the package's bad input (errors.error_kind): waiting does not help
                yield TriggerEvent({"status": "bad_input", "location": self.location, "message": str(err)})
                return
            except Exception as err:
                yield TriggerEvent(
                    {
                        "status": "error",
                        "location": self.location,
                        "message": f"could not check the record {self.location}: {type(err).__name__}: {err}",
                    }
                )
                return
            if readiness.ready:
                self.log.info("Training record ready: %s", readiness.reason)
                yield TriggerEvent({"status": "success", "location": readiness.location})
                return
            now = time.time()
            if self.deadline is not None and now >= self.deadline:
                yield TriggerEvent(
                    {
                        "status": "timeout",
                        "location": readiness.location,
                        "missing": readiness.missing,
                        "message": readiness.reason,
                    }
                )
                return
            self.log.info("Waiting for the training record: %s", readiness.reason)
            wait = self.poke_interval
            if self.deadline is not None:
                wait = min(wait, self.deadline - now)
            await asyncio.sleep(wait)
