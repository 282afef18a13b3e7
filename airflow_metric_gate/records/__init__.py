"""Reading the nightly training record (SPEC section 2).

A record is JSON Lines, one file or a directory of files (one per training process), or a log
format (TensorBoard, CSV, an MLflow run).  Reading streams line by line, validates each line
against :mod:`airflow_metric_gate.schemas.records` and merges everything into one :class:`Record`.
Any structural problem raises :class:`RecordError` naming the file and the 1-based line, before
anything is written anywhere.

The package holds one job per module: :mod:`.model` (the record, its columns, the error and the
limits), :mod:`.files` (the record's location and which files of a directory are read),
:mod:`.lines` (decoding JSON Lines), :mod:`.points` (merging lines and files, notes of dropped
points) and :mod:`.reading` (:func:`read_record` and the reader of each format).  Import from the
package.
"""

from __future__ import annotations

from airflow_metric_gate.records.files import MARKER_SKIP, is_data_file_name, skip_reason
from airflow_metric_gate.records.model import (
    MAX_DROPPED_NOTES,
    MAX_READ_WARNINGS,
    RECORD_FORMATS,
    Columns,
    DroppedPoint,
    InvalidStep,
    Point,
    Record,
    RecordError,
)
from airflow_metric_gate.records.points import add_log_points, merge_lines
from airflow_metric_gate.records.reading import read_record

__all__ = [
    "MARKER_SKIP",
    "MAX_DROPPED_NOTES",
    "MAX_READ_WARNINGS",
    "RECORD_FORMATS",
    "Columns",
    "DroppedPoint",
    "InvalidStep",
    "Point",
    "Record",
    "RecordError",
    "add_log_points",
    "is_data_file_name",
    "merge_lines",
    "read_record",
    "skip_reason",
]
