"""The selection with its values inline (version 1): what ``PersistValuesOperator`` accepts without a record.

Deprecated: reading one warns (:data:`PAYLOAD_DEPRECATED`); the operator's input is the
reference ``SelectStepsOperator`` returns
(:func:`~airflow_metric_gate.operators.select.selection_reference`, version 2).
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping, Sequence
from typing import Any

from airflow_metric_gate.declarations import GateDeclaration
from airflow_metric_gate.selection import Selection

SELECTION_PAYLOAD_VERSION = 1
#: What reading a payload of :data:`SELECTION_PAYLOAD_VERSION` warns.
PAYLOAD_DEPRECATED = (
    "a selection with its values inline (version 1, as pipeline.selection_to_payload encodes it) is "
    "deprecated as PersistValuesOperator's selection; pass the reference SelectStepsOperator returns "
    "(version 2, airflow_metric_gate.operators.select.selection_reference) instead"
)


def selection_to_payload(selections: Sequence[Selection]) -> dict:
    """Encode selections with their values: one entry per declaration, values as parallel lists.

    ``PersistValuesOperator`` accepts this as its ``selection`` (values given inline, without a
    record), deprecated: reading it warns.  No operator pushes it to XCom.

    :param selections: from :func:`~airflow_metric_gate.selection.select_steps`.
    """
    gates = []
    for s in selections:
        entry: dict[str, Any] = {"declaration": s.declaration.to_dict()}
        if s.error is not None:
            entry["error"] = s.error
        else:
            entry["steps"] = s.steps
            entry["values"] = s.values
            if s.declaration.steps == "last":
                entry["at_step"] = s.at_steps[0]
        gates.append(entry)
    return {"version": SELECTION_PAYLOAD_VERSION, "gates": gates}


def payload_to_selection(payload: Mapping) -> list[Selection]:
    """Decode :func:`selection_to_payload` output; the form is deprecated, so this warns.

    :param payload: the XCom payload.
    :raises ValueError: ``payload`` is no version 1 selection payload.
    """
    if not isinstance(payload, Mapping) or payload.get("version") != SELECTION_PAYLOAD_VERSION:
        raise ValueError("not a metric-gate selection payload (expected the output of SelectStepsOperator)")
    warnings.warn(PAYLOAD_DEPRECATED, DeprecationWarning, stacklevel=2)
    selections = []
    for entry in payload["gates"]:
        declaration = GateDeclaration.from_dict(entry["declaration"])
        if "error" in entry:
            selections.append(Selection(declaration, error=entry["error"]))
            continue
        steps = list(entry["steps"])
        values = [float(v) for v in entry["values"]]
        at_steps = [entry.get("at_step")] * len(steps) if declaration.steps == "last" else steps
        selections.append(Selection(declaration, steps=steps, values=values, at_steps=at_steps))
    return selections
