"""Ingest and select, the gate's first two stages: read the record, choose the values it is judged by.

The stages are :func:`~airflow_metric_gate.records.read_record` and
:func:`~airflow_metric_gate.selection.select_steps`; :func:`ingest` and :func:`select` are their
deprecated former names.
"""

from __future__ import annotations

import warnings
from collections.abc import Iterable
from typing import Any

from airflow_metric_gate.declarations import GateDeclaration
from airflow_metric_gate.records import Record, read_record
from airflow_metric_gate.selection import Selection, dropped_warnings, select_steps

#: What :func:`ingest` and :func:`select` warn.
INGEST_DEPRECATED = ("airflow_metric_gate.pipeline.ingest is deprecated; call "
                     "airflow_metric_gate.records.read_record(location, format=...) instead")
SELECT_DEPRECATED = ("airflow_metric_gate.pipeline.select is deprecated; call "
                     "airflow_metric_gate.selection.select_steps(record, declarations) instead")


def ingest(location: Any, *, format: str = "series") -> Record:
    """Read and validate a record: deprecated, call :func:`~airflow_metric_gate.records.read_record`.

    :param location: a file or directory (path or pathlib-like object); for ``mlflow``, the run's location.
    :param format: ``series``, ``rows``, ``tensorboard``, ``csv`` or ``mlflow``.
    """
    warnings.warn(INGEST_DEPRECATED, DeprecationWarning, stacklevel=2)
    return read_record(location, format=format)


def select(record: Record, declarations: Iterable[GateDeclaration]) -> list[Selection]:
    """Select the values declarations ask for: deprecated, call :func:`~airflow_metric_gate.selection.select_steps`.

    :param record: the ingested record.
    :param declarations: the resolved declarations.
    """
    warnings.warn(SELECT_DEPRECATED, DeprecationWarning, stacklevel=2)
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
