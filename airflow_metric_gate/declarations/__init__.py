"""Gate declarations: what to gate, and how tightly (SPEC sections 3 and 4).

A declaration names a metric (``metric_key``), the steps to select (``steps``), the band around
the baseline (``constraint``), whether a violation blocks (``enforce``) and why a known violation
is tolerated (``allowlist_reason``).  Declarations come from three sources, all validated by
:class:`~airflow_metric_gate.schemas.declarations.DeclarationSchema` with the same messages:

* Python objects in a DAG file (:func:`declare`, :func:`resolve_declarations`);
* YAML or JSON gates files (:func:`load_gates_file`);
* Python test files with top-level ``register_ci_gate(...)`` calls, parsed and never executed
  (:func:`parse_ci_gates`).

A field that is *omitted* is filled from the defaults table (:data:`GATE_DEFAULTS`, extended or
overridden per DAG or per gates file); a field written, even as ``None``, is never filled.

A coordinate's identity includes ``steps_key`` and ``constraint_key``: canonical JSON of the
literal as written (or of the defaults literal when the field was omitted).  Editing a literal or
a defaults entry therefore re-keys its coordinates and their baseline starts cold.

The package holds one job per module: :mod:`.model` (the declaration, the defaults table and its
merging), :mod:`.resolution` (turning what was written into checked declarations, and the one
duplicate check), :mod:`.files` (YAML and JSON gates files, read with a bounded loader) and
:mod:`.ci_gates` (the ``register_ci_gate(...)`` reader) and :mod:`.checking` (checks before a
night: when a DAG is parsed, ``metric-gate check``).  Import from the package.
"""

from __future__ import annotations

from airflow_metric_gate.declarations.checking import check_declarations, check_gates_file
from airflow_metric_gate.declarations.ci_gates import CI_GATE_CALL, parse_ci_gates
from airflow_metric_gate.declarations.files import load_gates_file
from airflow_metric_gate.declarations.model import (
    GATE_DEFAULTS,
    DeclarationError,
    GateDeclaration,
    canonical_key,
    merge_defaults,
)
from airflow_metric_gate.declarations.resolution import collapse_duplicates, declare, resolve_declarations, with_policy
from airflow_metric_gate.schemas.declarations import CONSTRAINT_KEYS, DOWN_KEYS, UP_KEYS

__all__ = [
    "CI_GATE_CALL",
    "CONSTRAINT_KEYS",
    "DOWN_KEYS",
    "GATE_DEFAULTS",
    "UP_KEYS",
    "DeclarationError",
    "GateDeclaration",
    "canonical_key",
    "check_declarations",
    "check_gates_file",
    "collapse_duplicates",
    "declare",
    "load_gates_file",
    "merge_defaults",
    "parse_ci_gates",
    "resolve_declarations",
    "with_policy",
]
