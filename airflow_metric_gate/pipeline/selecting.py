"""Ingest and select, the gate's first two stages: read the record, choose the values it is judged by."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from airflow_metric_gate.declarations import GateDeclaration
from airflow_metric_gate.records import Record, read_record
from airflow_metric_gate.selection import Selection, dropped_warnings, select_steps


def ingest(location: Any, *, format: str = "series") -> Record:
    """Read and validate a record.

    :param location: a file or directory (path or pathlib-like object); for ``mlflow``, the run's location.
    :param format: ``series``, ``rows``, ``tensorboard``, ``csv`` or ``mlflow``.
    """
    return read_record(location, format=format)


def select(record: Record, declarations: Iterable[GateDeclaration]) -> list[Selection]:
    """Select the values every declaration asks for (SPEC 5).

    :param record: the ingested record.
    :param declarations: the resolved declarations.
    """
    return select_steps(record, declarations)


def record_warnings(record: Record, declarations: Iterable[GateDeclaration]) -> list[dict]:
    """Return what the verdict warns about a night's record: dropped points, lines no gate can read.

    See :func:`~airflow_metric_gate.selection.dropped_warnings`;
    :func:`~airflow_metric_gate.pipeline.persist` keeps them with the run and
    :func:`~airflow_metric_gate.pipeline.evaluate` puts them in the verdict's ``warnings``.

    :param record: the ingested record.
    :param declarations: the resolved declarations.
    """
    return dropped_warnings(record, list(declarations))
