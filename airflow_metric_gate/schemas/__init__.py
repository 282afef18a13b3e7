"""marshmallow schemas of every external shape the package reads or writes.

Validation lives here and only here: record lines, gate declarations, gates files, defaults
entries and the verdict.  Each schema module is importable on its own; this package re-exports
the schemas (one ``from ... import X as X`` line per module).
"""

from __future__ import annotations

from airflow_metric_gate.schemas.declarations import DeclarationSchema as DeclarationSchema
from airflow_metric_gate.schemas.declarations import DefaultsEntrySchema as DefaultsEntrySchema
from airflow_metric_gate.schemas.declarations import GateDeclarationSchema as GateDeclarationSchema
from airflow_metric_gate.schemas.declarations import GatesFileSchema as GatesFileSchema
from airflow_metric_gate.schemas.records import RecordLineSchema as RecordLineSchema
from airflow_metric_gate.schemas.records import RowsLineSchema as RowsLineSchema
