"""Wait for the nightly training record to exist and be complete."""

from __future__ import annotations

import os
import time
from collections.abc import Sequence
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from airflow.sdk import BaseSensorOperator, PokeReturnValue, conf
from airflow.sdk.exceptions import AirflowException, AirflowFailException, AirflowSensorTimeout

from airflow_metric_gate.enums import RecordFormat
from airflow_metric_gate.errors import BadInputError
from airflow_metric_gate.paths import location_text
from airflow_metric_gate.readiness import DEFAULT_MARKER, Readiness, validate_marker
from airflow_metric_gate.triggers.training_output import TrainingOutputTrigger, check_location

if TYPE_CHECKING:
    from airflow.sdk import Context

# How long past its own deadline the triggerer may keep a deferred sensor before Airflow's
# generic deferral timeout fires; the trigger normally reports the timeout itself, with the reason.
_DEFERRAL_GRACE_SECONDS = 300.0


class TrainingOutputSensor(BaseSensorOperator):
    """Wait until a nightly training record exists and is complete, then hand its location downstream.

    The record is a JSON Lines file or a directory of them, on local disk or any Airflow object
    storage (``file://``, ``s3://``, ``gs://``, ...).  It is complete when its completion marker
    exists: ``marker`` inside the record directory, or beside the record file.  With
    ``marker=None`` the record only has to be non-empty.

    The task's return value (XCom ``return_value``) is the record location as a string, ready for
    :class:`~airflow_metric_gate.operators.ingest.IngestRecordOperator`.  At ``timeout`` the task
    fails without retries (``AirflowSensorTimeout``, or skips with ``soft_fail``) and the message
    names the location and what was missing: the record itself, its marker, or any data.

    Runs in ``poke`` or ``reschedule`` mode, or deferred to the triggerer with
    ``deferrable=True`` (one check on the worker first, so a record already there costs no deferral).

    With ``format="tensorboard"`` or ``"csv"`` the record is a run directory of event files or
    CSV logs, complete by the same marker (with ``marker=None``: once it holds a non-empty event
    file, or ``*.csv`` file).  With ``format="mlflow"`` the path names an MLflow run
    (``runs:/<id>`` or ``experiments:/<name>?tag.<key>=<value>``, optionally with
    ``tracking_uri=<uri>``): it is complete when the run is ``FINISHED``; ``marker`` is not used.
    The location pushed is then ``runs:/<id>`` (with ``?tracking_uri=<uri>`` when the path wrote
    one), the run found, so that the next tasks read that very run.  A run that ended ``FAILED``
    or ``KILLED``, or a ``runs:/`` id that names no run, fails the task without retries.

    :param path: the record location: a local path or an object-storage URI (templated).
    :param marker: the completion marker's file name, relative to the record directory (or to the
        directory holding the record file); ``None`` requires only a non-empty record (templated).
    :param storage_conn_id: the Airflow connection for the object storage; ``None`` uses the
        default credentials or a connection named in the URI (``s3://conn_id@bucket/key``) (templated).
    :param format: the record format: ``series``, ``rows``, ``tensorboard``, ``csv`` or ``mlflow`` (templated).
    :param deferrable: wait in the triggerer instead of on a worker.
    :param kwargs: passed to :class:`~airflow.sdk.BaseSensorOperator` (``poke_interval``,
        ``timeout``, ``mode``, ``soft_fail``, ...).
    """

    template_fields: Sequence[str] = ("path", "marker", "storage_conn_id", "format")
    ui_color = "#dbe8f5"

    def __init__(
        self,
        *,
        path: str | os.PathLike[str],
        marker: str | None = DEFAULT_MARKER,
        storage_conn_id: str | None = None,
        format: str = "series",
        deferrable: bool = conf.getboolean("operators", "default_deferrable", fallback=False),
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.path = path
        self.marker = marker
        self.storage_conn_id = storage_conn_id
        self.format = format
        self.deferrable = deferrable
        self._last_readiness: Readiness | None = None

    def _location(self) -> str:
        location = location_text(self.path) if isinstance(self.path, os.PathLike) else self.path
        if not isinstance(location, str) or not location.strip():
            raise AirflowFailException(f"path must name the training record, got {self.path!r}")
        return location.strip()

    def _validate(self) -> None:
        problem = RecordFormat.problem(self.format, "format")
        if problem:
            raise AirflowFailException(problem)
        try:
            validate_marker(self.marker)
        except ValueError as err:
            raise AirflowFailException(str(err)) from err

    def poke(self, context: Context) -> PokeReturnValue:
        """Check the record once.

        :param context: the task context.
        """
        self._validate()
        try:
            readiness = check_location(
                self._location(), marker=self.marker, storage_conn_id=self.storage_conn_id, format=self.format
            )
        except BadInputError as err:  # the record can never be complete: waiting longer does not help
            raise AirflowFailException(f"The training record cannot be gated: {err}") from err
        self._last_readiness = readiness
        if readiness.ready:
            self.log.info("Training record ready: %s", readiness.reason)
            return PokeReturnValue(is_done=True, xcom_value=readiness.location)
        self.log.info("Waiting for the training record: %s", readiness.reason)
        return PokeReturnValue(is_done=False)

    def _timeout_message(self, reason: str) -> str:
        if self.format == RecordFormat.MLFLOW:
            return (
                f"Timed out after {self.timeout:g}s waiting for the MLflow run: {reason}. "
                "Check that the training job ran and that its run ended (status FINISHED)."
            )
        marker = "off" if self.marker is None else repr(self.marker)
        return (
            f"Timed out after {self.timeout:g}s waiting for the training record: {reason}. "
            f"Check that the training job ran and wrote its output there (completion marker: {marker})."
        )

    def execute(self, context: Context) -> str | None:
        """Wait for the record; return its location (pushed to XCom).

        :param context: the task context.
        """
        if not self.deferrable:
            try:
                return super().execute(context)
            except AirflowSensorTimeout as err:
                last = self._last_readiness
                if last is None:
                    raise
                raise AirflowSensorTimeout(self._timeout_message(last.reason)) from err
        done = self.poke(context)
        if done:
            return done.xcom_value
        self.defer(
            trigger=TrainingOutputTrigger(
                location=self._location(),
                marker=self.marker,
                storage_conn_id=self.storage_conn_id,
                poke_interval=float(self.poke_interval),
                deadline=time.time() + self.timeout,
                format=self.format,
            ),
            method_name="execute_complete",
            timeout=timedelta(seconds=self.timeout + max(_DEFERRAL_GRACE_SECONDS, 2 * self.poke_interval)),
        )

    def execute_complete(self, context: Context, event: dict[str, Any] | None = None) -> str:
        """Resume after the trigger fired; return the record location (pushed to XCom).

        :param context: the task context.
        :param event: the trigger's event payload.
        """
        event = event or {}
        status = event.get("status")
        location = event.get("location", str(self.path))
        if status == "success":
            self.log.info("Training record ready: %s", location)
            return location
        if status == "timeout":
            reason = event.get("message") or f"the record {location} is not complete"
            raise AirflowSensorTimeout(self._timeout_message(reason))
        if status == "bad_input":
            raise AirflowFailException(
                f"The training record cannot be gated: {event.get('message') or location}"
            )
        if status == "error":
            raise AirflowException(event.get("message") or f"could not check the record {location}")
        raise AirflowException(f"unexpected event from TrainingOutputTrigger: {event!r}")
