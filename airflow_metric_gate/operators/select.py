"""Resolve the gate declarations and pin the record they select from: a reference, never values."""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from airflow_metric_gate.declarations import (
    GateDeclaration,
    check_declarations,
    collapse_duplicates,
    load_gates_file,
    resolve_declarations,
    with_policy,
)
from airflow_metric_gate.declarations.checking import is_local_literal_path
from airflow_metric_gate.enums import RecordFormat
from airflow_metric_gate.operators._shared import optional, upstream_value
from airflow_metric_gate.operators.base import MetricGateBaseOperator
from airflow_metric_gate.operators.ingest import pinned_record, record_location
from airflow_metric_gate.printable import printable

if TYPE_CHECKING:
    from airflow.sdk import Context

#: The version of the reference :class:`SelectStepsOperator` returns (1 carried the values).
REFERENCE_VERSION = 2
#: The counts of the ingest summary a reference carries on.
_COUNTS = ("metrics", "points", "files", "skipped")
_CHECKSUM_LENGTH = 64


def selection_reference(
    *,
    location: str,
    format: str,
    checksum: str,
    declarations: Sequence[GateDeclaration],
    counts: Mapping[str, Any],
    storage_conn_id: str | None = None,
) -> dict[str, Any]:
    """Return what :class:`SelectStepsOperator` passes on: the record pinned, the declarations resolved.

    Its size does not grow with the record: a few hundred bytes per declaration.

    :param location: the record location.
    :param format: the record format.
    :param checksum: the record's checksum (see ``_record_copy``).
    :param declarations: the resolved declarations.
    :param counts: the record's counts (``metrics``, ``points``, ``files``, ``skipped``).
    :param storage_conn_id: the Airflow connection of the object storage, if any.
    """
    reference: dict[str, Any] = {
        "version": REFERENCE_VERSION,
        "location": location,
        "format": format,
        "checksum": checksum,
        "declarations": [d.to_dict() for d in declarations],
        "counts": {"declarations": len(declarations), **{k: counts[k] for k in _COUNTS if k in counts}},
    }
    if storage_conn_id:
        reference["storage_conn_id"] = storage_conn_id
    return reference


def is_reference(payload: Any) -> bool:
    """Return whether ``payload`` is a reference :func:`selection_reference` made.

    :param payload: an upstream XCom value or a parameter.
    """
    return isinstance(payload, Mapping) and payload.get("version") == REFERENCE_VERSION


def reference_declarations(reference: Mapping[str, Any]) -> list[GateDeclaration]:
    """Return the declarations of a reference, checking its fields.

    :param reference: from :func:`selection_reference`.
    :raises ValueError: a field is missing or malformed.
    """
    for name in ("location", "format", "checksum"):
        if not isinstance(reference.get(name), str) or not reference[name]:
            raise ValueError(f"the reference has no {name}")
    if len(reference["checksum"]) != _CHECKSUM_LENGTH:
        raise ValueError("the reference's checksum is not a SHA-256")
    problem = RecordFormat.problem(reference["format"], "the reference's format")
    if problem:
        raise ValueError(problem)
    declarations = reference.get("declarations")
    if not isinstance(declarations, list):
        raise ValueError("the reference has no declarations list")
    return [GateDeclaration.from_dict(d) for d in declarations]



class SelectStepsOperator(MetricGateBaseOperator):
    """Resolve the gate declarations and pin the record their values are selected from.

    Declarations come from a gates file (YAML, JSON, or a Python test file with
    ``register_ci_gate(...)`` calls, parsed and never executed), from ``gates`` written in the DAG
    file, or both.  Invalid declarations or a malformed record fail the task without retries; and
    when the DAG file is parsed, a local ``gates_file`` written as a plain path and the ``gates``
    written in the DAG file are checked already, so a bad one is a DAG import error, not a failed night.

    The task's return value is a reference, never the values: the record's location, format and
    checksum, the resolved declarations, and counts; a few hundred bytes per declaration whatever
    the record's size::

        {"version": 2, "location": "s3://bucket/nightly/2026-11-30", "format": "series",
         "checksum": "<sha256>", "declarations": [{"metric_key": ...}, ...],
         "counts": {"declarations": 7, "metrics": 40, "points": 100000, "files": 8, "skipped": 1}}

    :class:`PersistValuesOperator` reads the record again, checks its checksum, and selects the
    values there; a declaration that cannot select (metric absent, duplicate step, ...) is not a
    task failure: it is stored as an ERROR for the verdict.  Given the summary of
    :class:`IngestRecordOperator` (which read and checked the record), this task does not read the
    record at all; given a bare location, it reads the record once to check it and compute its
    checksum.

    :param record: the record location, or the summary :class:`IngestRecordOperator` returned;
        ``None`` takes it from the only upstream task's XCom (templated).
    :param gates_file: path of a gates file; a relative path is taken from the DAG file's folder (templated).
    :param gates: declarations written in the DAG file: mappings (``metric_key``, ``steps``,
        ``constraint``, ``enforce``, ``allowlist_reason``) or ``GateDeclaration`` objects.
    :param defaults: entries extending or overriding the built-in defaults table (a gates file's
        own ``defaults`` take precedence for its declarations).
    :param format: the record format (``series``, ``rows``, ``tensorboard``, ``csv``, ``mlflow``);
        ``None`` uses the one the ingest task reported, else ``series`` (templated).
    :param storage_conn_id: the Airflow connection of the object storage, if any (templated).
    :param policy: ``reference`` or ``calibrated`` for the declarations that set no policy of their
        own (nor their gates file); ``None``: ``reference`` (templated).
    :param kwargs: passed to :class:`~airflow.sdk.BaseOperator`.
    """

    template_fields: Sequence[str] = ("record", "gates_file", "format", "storage_conn_id", "policy")
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
        policy: str | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.policy = policy
        self.record = record
        self.gates_file = gates_file
        self.gates = gates
        self.defaults = defaults
        self.format = format
        self.storage_conn_id = storage_conn_id
        self._check_when_parsed()

    def _check_when_parsed(self) -> None:
        """Refuse invalid declarations when the DAG file is parsed, so a bad gates file never reaches a night.

        Only what is known now is checked, cheaply: a local ``gates_file`` written as a plain path
        (read once per version of the file; a templated path or a URI waits for the night) and the
        ``gates`` written in the DAG file.

        :raises DeclarationError: naming the file, line and field (a DAG import error).
        """
        gates = self.gates if isinstance(self.gates, (list, tuple)) else None
        if gates is None and not is_local_literal_path(self.gates_file):
            return
        fileloc = getattr(self.dag, "fileloc", None) if self.has_dag() else None
        source = f"{self.dag_id}.{self.task_id}" if self.has_dag() else self.task_id
        check_declarations(gates_file=self.gates_file, gates=gates, defaults=self.defaults,
                           relative_to=os.path.dirname(fileloc) if fileloc else None, source=source)

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
            raise self.bad_input("give gates_file= or gates=")
        found: list[GateDeclaration] = []
        with self.core_errors():
            if path is not None:
                found.extend(load_gates_file(path, defaults=self.defaults))
            if self.gates is not None:
                source = f"{self.dag_id}.{self.task_id}" if self.has_dag() else self.task_id
                found.extend(resolve_declarations(self.gates, defaults=self.defaults, source=source))
            found, warnings = collapse_duplicates(with_policy(found, optional(self.policy)))
        for warning in warnings:
            self.log.warning("%s", printable(warning))
        return found

    def execute(self, context: Context) -> dict[str, Any]:
        """Resolve the declarations and return the reference to the pinned record (pushed to XCom).

        :param context: the task context.
        """
        upstream = self.record if optional(self.record) is not None else upstream_value(self, context, "record")
        location = record_location(upstream)
        if location is None:
            raise self.bad_input("no record location given")
        summary = upstream if isinstance(upstream, Mapping) else {}
        fmt = optional(self.format) or summary.get("format") or "series"
        problem = RecordFormat.problem(fmt, "format")
        if problem:
            raise self.bad_input(problem)

        # the select task's own connection, else the one the ingest task read the record with
        carried = summary.get("storage_conn_id")
        storage_conn_id = optional(self.storage_conn_id) or (optional(carried) if isinstance(carried, str) else None)
        declarations = self.declarations()
        self.log.info("%s gate declaration(s) for record %s", len(declarations), location)
        checksum = summary.get("checksum")
        counts: Mapping[str, Any] = summary
        if isinstance(checksum, str) and len(checksum) == _CHECKSUM_LENGTH and summary.get("format", fmt) == fmt:
            self.log.info("Record %s was read and checked by the ingest task: not read again here", location)
        else:
            self.log.info("Reading training record %s (format %s) to check it and pin its checksum", location, fmt)
            with self.core_errors(record=location):
                record, checksum, _ = pinned_record(location, storage_conn_id, fmt)
            counts = {"metrics": len(record), "points": record.point_count(), "files": len(record.sources),
                      "skipped": len(record.skipped)}
        self.log.info("Record %s pinned by checksum %s", location, checksum)
        return selection_reference(
            location=location,
            format=fmt,
            checksum=checksum,
            declarations=declarations,
            counts=counts,
            storage_conn_id=storage_conn_id,
        )
