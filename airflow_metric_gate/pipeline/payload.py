"""The selection with its values inline: what ``PersistValuesOperator`` accepts for use without a record."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from airflow_metric_gate.declarations import GateDeclaration
from airflow_metric_gate.selection import Selection

SELECTION_PAYLOAD_VERSION = 1


def selection_to_payload(selections: Sequence[Selection]) -> dict:
    """Encode selections with their values: one entry per declaration, values as parallel lists.

    ``PersistValuesOperator`` accepts this as its ``selection`` (values given inline, without a
    record); no operator pushes it to XCom.

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
    """Decode :func:`selection_to_payload` output.

    :param payload: the XCom payload.
    """
    if not isinstance(payload, Mapping) or payload.get("version") != SELECTION_PAYLOAD_VERSION:
        raise ValueError("not a metric-gate selection payload (expected the output of SelectStepsOperator)")
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
