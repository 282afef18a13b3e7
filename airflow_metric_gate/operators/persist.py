"""Store the selected values of a run, idempotently."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from airflow_metric_gate.operators._record_copy import drop_copy
from airflow_metric_gate.operators._shared import optional, run_night, run_role, upstream_value
from airflow_metric_gate.operators.base import MetricGateBaseOperator
from airflow_metric_gate.operators.ingest import checked_record
from airflow_metric_gate.operators.select import is_reference, reference_declarations
from airflow_metric_gate.pipeline import (
    PAYLOAD_DEPRECATED,
    RunInfo,
    SeriesIdentity,
    airflow_store_run_id,
    payload_to_selection,
    persist,
    record_warnings,
)
from airflow_metric_gate.printable import printable
from airflow_metric_gate.selection import Selection, select_steps

if TYPE_CHECKING:
    from airflow.sdk import Context


class PersistValuesOperator(MetricGateBaseOperator):
    """Select the values from the pinned record and write the run, one row per (metric, step), to the store.

    The values never travel through XCom: the task reads the record the reference of
    :class:`SelectStepsOperator` names (the local copy ingest kept when it is on this machine and
    intact, else the record itself), checks it against the reference's checksum, and selects
    there.  A record that changed since it was ingested fails the task without retries, naming
    its location; nothing is stored.  A declaration that cannot select (metric absent, duplicate
    step, ...) is stored as a selection error, an ERROR of the verdict.

    The store run id derives from the Airflow run (DAG id, run id, map index), this task's id and
    the series identity: a retry or a cleared task replaces its own rows, never duplicates them,
    also under dynamic task mapping, and two gate chains in one DAG run never share a store run.
    The run's role is ``baseline`` for scheduled (and backfill) runs and ``shadow`` for manual
    ones, unless ``role`` says otherwise; only trusted baseline runs feed future baselines.
    The run is stored as ``pending``; :class:`EvaluateGateOperator` marks it trusted or not.
    Its night (the logical date that orders history) is ``night`` when given, else the DAG run's
    logical date; a baseline run with neither (``airflow dags trigger`` makes runs without a
    logical date) is refused without retry and stores nothing.

    The task's return value identifies the stored run for the next task::

        {"run_id": "af-...", "rows": 412, "errors": 0, "declarations": 7, "series": "rl-finetune",
         "backend": "cuda", "suite": "nightly-8xh100", "role": "baseline",
         "logical_date": "2026-11-30T00:00:00+00:00"}

    :param selection: the reference :class:`SelectStepsOperator` returned (or, deprecated: it warns,
        a selection with its values, as ``pipeline.selection_to_payload`` encodes it, for use
        without a record); ``None`` takes it from the only upstream task's XCom (templated).
    :param series: the training job whose nights are comparable (templated).
    :param backend: the hardware, default ``cuda`` (templated).
    :param suite: the schedule or cluster, e.g. ``nightly-8xh100`` (templated).
    :param role: ``baseline``, ``shadow``, or ``auto`` (default) for the DAG run type's role (templated).
    :param night: the night this run gates, ``YYYY-MM-DD`` or an ISO 8601 datetime (UTC when naive);
        empty or ``None`` takes the DAG run's logical date, e.g. ``"{{ params.night }}"`` (templated).
    :param conn_id: the Airflow connection of the metric store (type ``metric_gate`` or
        ``postgres``, see :class:`~airflow_metric_gate.hooks.metric_store.MetricStoreHook`); ``None``
        uses the ``[metric_gate] conn_id`` option, default ``metric_gate_db`` (templated).
    :param storage_conn_id: the Airflow connection of the record's object storage; ``None`` uses
        the one the reference names, if any (templated).
    :param commit_sha: the trained code's commit, kept as provenance (templated).
    :param training_job_id: the training job's id, kept as provenance (templated).
    :param provenance: further free-form provenance fields (templated).
    :param kwargs: passed to :class:`~airflow.sdk.BaseOperator`.
    """

    template_fields: Sequence[str] = (
        "selection",
        "series",
        "backend",
        "suite",
        "role",
        "night",
        "conn_id",
        "storage_conn_id",
        "commit_sha",
        "training_job_id",
        "provenance",
    )
    ui_color = "#dce8f0"

    def __init__(
        self,
        *,
        series: str,
        selection: Mapping[str, Any] | None = None,
        backend: str = "cuda",
        suite: str = "default",
        role: str = "auto",
        night: Any = None,
        conn_id: str | None = None,
        commit_sha: str | None = None,
        training_job_id: str | None = None,
        provenance: Mapping[str, Any] | None = None,
        storage_conn_id: str | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(conn_id=conn_id, **kwargs)
        self.series = series
        self.selection = selection
        self.backend = backend
        self.suite = suite
        self.role = role
        self.night = night
        self.storage_conn_id = storage_conn_id
        self.commit_sha = commit_sha
        self.training_job_id = training_job_id
        self.provenance = provenance

    def _identity(self) -> SeriesIdentity:
        values = {
            "series": optional(self.series),
            "backend": optional(self.backend),
            "suite": optional(self.suite),
        }
        for name, value in values.items():
            if not isinstance(value, str):
                raise self.bad_input(f"{name} must be a non-empty string, got {value!r}")
        return SeriesIdentity(**values)

    def _run(self, context: Context, identity: SeriesIdentity) -> RunInfo:
        ti = context["ti"]
        map_index = getattr(ti, "map_index", -1)
        map_index = -1 if map_index is None else map_index
        provenance: dict[str, Any] = dict(self.provenance or {})
        provenance.update(
            {
                "dag_id": ti.dag_id,
                "airflow_run_id": ti.run_id,
                "try_number": ti.try_number,
                "map_index": map_index,
                "task_id": ti.task_id,
            }
        )
        for key in ("commit_sha", "training_job_id"):
            if optional(getattr(self, key)) is not None:
                provenance[key] = str(getattr(self, key))
        role = run_role(self.role, context)
        return RunInfo(
            run_id=airflow_store_run_id(ti.dag_id, ti.run_id, map_index, task_id=ti.task_id, identity=identity),
            role=role,
            logical_date=run_night(self.night, role, context, self.task_id),
            provenance=provenance,
        )

    def _selections(self, payload: Any) -> tuple[list[Selection], tuple[str, str] | None]:
        """Return the selections, and the location and checksum of the record they came from, if any."""
        if not is_reference(payload):
            try:
                selections = payload_to_selection(payload)
            except (ValueError, KeyError, TypeError) as err:
                raise self.bad_input(f"selection is not usable: {err}") from err
            self.log.warning("%s", PAYLOAD_DEPRECATED)
            return selections, None
        try:
            declarations = reference_declarations(payload)
        except (ValueError, KeyError, TypeError) as err:
            raise self.bad_input(f"selection is not usable: {err}") from err
        location, checksum = payload["location"], payload["checksum"]
        storage_conn_id = optional(self.storage_conn_id) or payload.get("storage_conn_id")
        self.log.info("Reading training record %s, checked against checksum %s", location, checksum)
        with self.core_errors(record=location):
            record, from_copy = checked_record(location, storage_conn_id, payload["format"], checksum)
        if from_copy:
            self.log.info("Read the local copy ingest verified of %s (not downloaded again)", location)
        selections = select_steps(record, declarations)
        self.record_warnings = record_warnings(record, declarations)
        for warning in self.record_warnings:
            self.log.warning("Record %s: %s", location, printable(warning["message"]))
        for s in selections:
            if s.error is not None:
                self.log.warning("%s: cannot select: %s", printable(s.declaration.metric_key), printable(s.error))
        self.log.info(
            "Selected %s value(s) for %s declaration(s), %s declaration error(s)",
            sum(len(s) for s in selections),
            len(selections),
            sum(1 for s in selections if s.error is not None),
        )
        return selections, (location, checksum)

    def execute(self, context: Context) -> dict[str, Any]:
        """Select from the record, write the run; return what identifies it (pushed to XCom).

        :param context: the task context.
        """
        payload = self.selection if self.selection is not None else upstream_value(self, context, "selection")
        identity = self._identity()
        run = self._run(context, identity)
        self.record_warnings = []
        selections, pinned = self._selections(payload)
        self.log.info(
            "Storing run %s of series %s (%s, %s) as %s, logical date %s",
            run.run_id,
            printable(identity.series),
            printable(identity.backend),
            printable(identity.suite),
            run.role,
            run.logical_date.isoformat(),
        )
        with self.store() as store:
            written = persist(store, identity, run, selections, warnings=self.record_warnings)
        if pinned is not None:
            drop_copy(*pinned)
        self.log.info(
            "Stored %s value(s) and %s selection error(s) for %s declaration(s) under run %s",
            written["rows"],
            written["errors"],
            written["declarations"],
            written["run_id"],
        )
        return {
            **written,
            "series": identity.series,
            "backend": identity.backend,
            "suite": identity.suite,
            "role": run.role,
            "logical_date": run.logical_date.isoformat(),
        }
