"""Pick the training steps every gate declaration asks for."""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from airflow.sdk import BaseOperator
from airflow.sdk.exceptions import AirflowFailException

from airflow_metric_gate.declarations import (
    DeclarationError,
    GateDeclaration,
    collapse_duplicates,
    load_gates_file,
    resolve_declarations,
)
from airflow_metric_gate.enums import RecordFormat
from airflow_metric_gate.operators._record_copy import drop_copy, read_copy
from airflow_metric_gate.operators._shared import optional, upstream_value
from airflow_metric_gate.operators.ingest import read_record_at, record_location
from airflow_metric_gate.pipeline import select, selection_to_payload
from airflow_metric_gate.printable import printable

if TYPE_CHECKING:
    from airflow.sdk import Context


class SelectStepsOperator(BaseOperator):
    """Select, from the record, the values each gate declaration asks for.

    Declarations come from a gates file (YAML, JSON, or a Python test file with
    ``register_ci_gate(...)`` calls, parsed and never executed), from ``gates`` written in the DAG
    file, or both.  Invalid declarations or a malformed record fail the task without retries.
    A declaration that cannot select (metric absent, duplicate step, ...) is not a task failure:
    it travels on as an ERROR for the verdict.

    The task's return value is the compact selection (one entry per declaration, values as
    parallel lists), ready for :class:`PersistValuesOperator`.

    :param record: the record location, or the summary :class:`IngestRecordOperator` returned;
        ``None`` takes it from the only upstream task's XCom (templated).  With the summary of a
        record on object storage, the local copy ingest kept is read when it is on this machine
        and matches its checksums; otherwise the record is read from the storage again.
    :param gates_file: path of a gates file; a relative path is taken from the DAG file's folder (templated).
    :param gates: declarations written in the DAG file: mappings (``metric_key``, ``steps``,
        ``constraint``, ``enforce``, ``allowlist_reason``) or ``GateDeclaration`` objects.
    :param defaults: entries extending or overriding the built-in defaults table (a gates file's
        own ``defaults`` take precedence for its declarations).
    :param format: the record format, ``series`` or ``rows``; ``None`` uses the one the ingest
        task reported, else ``series`` (templated).
    :param storage_conn_id: the Airflow connection of the object storage, if any (templated).
    :param kwargs: passed to :class:`~airflow.sdk.BaseOperator`.
    """

    template_fields: Sequence[str] = ("record", "gates_file", "format", "storage_conn_id")
    ui_color = "#e8f0dc"

    def __init__(
        self,
        *,
        record: str | Mapping[str, Any] | None = None,
        gates_file: str | None = None,
        gates: Sequence[Mapping[str, Any] | GateDeclaration] | None = None,
        defaults: Mapping[str, Mapping[str, Any]] | None = None,
        format: str | None = None,
        storage_conn_id: str | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.record = record
        self.gates_file = gates_file
        self.gates = gates
        self.defaults = defaults
        self.format = format
        self.storage_conn_id = storage_conn_id

    def _gates_path(self) -> str | None:
        path = optional(self.gates_file)
        if path is None or os.path.isabs(path) or "://" in path:
            return path
        fileloc = getattr(self.dag, "fileloc", None) if self.has_dag() else None
        return os.path.join(os.path.dirname(fileloc), path) if fileloc else path

    def declarations(self) -> list[GateDeclaration]:
        """Resolve the declarations of ``gates_file`` then ``gates``.

        :raises AirflowFailException: none given, or one is invalid.
        """
        path = self._gates_path()
        if path is None and self.gates is None:
            raise AirflowFailException(f"{self.task_id}: give gates_file= or gates=")
        found: list[GateDeclaration] = []
        try:
            if path is not None:
                found.extend(load_gates_file(path, defaults=self.defaults))
            if self.gates is not None:
                source = f"{self.dag_id}.{self.task_id}" if self.has_dag() else self.task_id
                found.extend(resolve_declarations(self.gates, defaults=self.defaults, source=source))
            found, warnings = collapse_duplicates(found)
        except DeclarationError as err:
            raise AirflowFailException(printable(f"invalid gate declarations: {err}")) from err
        for warning in warnings:
            self.log.warning("%s", printable(warning))
        return found

    def execute(self, context: Context) -> dict[str, Any]:
        """Read the record, select, and return the compact selection (pushed to XCom).

        :param context: the task context.
        """
        upstream = self.record if optional(self.record) is not None else upstream_value(self, context, "record")
        location = record_location(upstream)
        if location is None:
            raise AirflowFailException(f"{self.task_id}: no record location given")
        fmt = optional(self.format) or (upstream.get("format") if isinstance(upstream, Mapping) else None)
        fmt = fmt or "series"
        problem = RecordFormat.problem(fmt, "format")
        if problem:
            raise AirflowFailException(problem)

        declarations = self.declarations()
        self.log.info("%s gate declaration(s) for record %s", len(declarations), location)
        copy = upstream.get("copy") if isinstance(upstream, Mapping) else None
        record = read_copy(location, copy, format=fmt) if copy is not None else None
        if record is not None:
            self.log.info("Reading the local copy ingest verified of %s (not downloaded again)", location)
        else:
            if copy is not None:
                self.log.info("No intact local copy of %s on this machine: reading the storage", location)
            record, _ = read_record_at(location, self.storage_conn_id, fmt)
        selections = select(record, declarations)
        drop_copy(location, copy)
        for s in selections:
            if s.error is not None:
                self.log.warning("%s: cannot select: %s", printable(s.declaration.metric_key), printable(s.error))
        self.log.info(
            "Selected %s value(s) for %s declaration(s), %s declaration error(s)",
            sum(len(s) for s in selections),
            len(selections),
            sum(1 for s in selections if s.error is not None),
        )
        payload = selection_to_payload(selections)
        payload["location"] = location
        return payload
