"""Opt-in judging rules a declaration can switch on; the defaults leave every verdict as it was.

``min_failing_steps`` (persistence): a declaration's FAIL results count only when at least
``min_failing_steps`` of its selected steps leave the band in the same run (or all of them, when it
selected fewer).  Below that, its FAIL results are tolerated: reported as PASS with the reason, and
the run stays trusted as far as this declaration goes.  An isolated spike on one step of a
thousand no longer fails a night; a level shift, which moves many steps, still does.

``band: mad`` with ``mad_k`` (robust band): a coordinate is judged by the median of its baseline
values plus or minus ``mad_k`` times their median absolute deviation (decided by
:func:`airflow_metric_gate.evaluation.judge`, from :data:`~airflow_metric_gate.evaluation.MAD_MIN_VALUES`
baseline values on).

``night_mean_k`` (whole night): besides its steps, the declaration's night is judged as a whole:
the sum of its steps' robust z divided by the square root of their number must stay within
``-+night_mean_k`` (decided by :func:`airflow_metric_gate.evaluation.judge_night`); beyond it,
one declaration-level FAIL result.  A shift too small for any one step's band, on many steps, is
caught.

``severity: warn``: the declaration's FAIL and ERROR results never block; they still make the run
untrusted (the regressed value feeds no baseline).

Each option is stored with a run's declarations only when switched on (:func:`rule_options`).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from typing import Any

from airflow_metric_gate.enums import FAIL, PASS
from airflow_metric_gate.schemas.declarations import DEFAULT_MAD_K

__all__ = ["applies_persistence", "is_warning", "mad_k", "min_failing_steps", "night_mean_k", "rule_options",
           "tolerate_isolated_failures"]


def min_failing_steps(gate: Mapping[str, Any]) -> int:
    """Return a stored or serialized declaration's ``min_failing_steps`` (1 when absent)."""
    return int(gate.get("min_failing_steps") or 1)


def mad_k(gate: Mapping[str, Any]) -> float | None:
    """Return a stored or serialized declaration's ``mad_k`` when it has ``band: mad``, else ``None``."""
    return float(gate.get("mad_k") or DEFAULT_MAD_K) if gate.get("band") == "mad" else None


def night_mean_k(gate: Mapping[str, Any]) -> float | None:
    """Return a stored or serialized declaration's ``night_mean_k`` (``None``: the whole-night rule is off)."""
    k = gate.get("night_mean_k")
    return None if k is None else float(k)


def is_warning(gate: Mapping[str, Any]) -> bool:
    """Return whether a stored or serialized declaration has ``severity: warn`` (its failures never block)."""
    return gate.get("severity") == "warn"


def rule_options(gate: Mapping[str, Any]) -> dict[str, Any]:
    """Return the opt-in judging options a stored or serialized declaration switched on, as stored.

    The same fields, under the same rule, as
    :meth:`~airflow_metric_gate.declarations.GateDeclaration.rule_options`.
    """
    out: dict[str, Any] = {}
    if min_failing_steps(gate) != 1:
        out["min_failing_steps"] = min_failing_steps(gate)
    k = mad_k(gate)
    if k is not None:
        out.update(band="mad", mad_k=k)
    if night_mean_k(gate) is not None:
        out["night_mean_k"] = night_mean_k(gate)
    if is_warning(gate):
        out["severity"] = "warn"
    return out


def tolerate_isolated_failures(
    items: list[tuple[Any, Any, Mapping[str, Any]]], counts: dict[str, int], selected: Counter, *,
    keep_tolerated: bool, per_declaration: Mapping[tuple[str, str, str], dict[str, int]] | None = None,
) -> list[tuple[Any, Any, Mapping[str, Any]]]:
    """Apply ``min_failing_steps`` to one run's results.

    :param items: ``(ordinal, result, gate)`` for every FAIL result of the run (and any others);
        ``result`` has ``status``, ``reason`` and the coordinate keys; ``gate`` the declaration.
    :param counts: the run's status counts, updated in place.
    :param selected: ``(metric_key, steps_key, constraint_key)`` -> how many coordinates the
        declaration has in the run.
    :param keep_tolerated: keep the tolerated results (now PASS) in the returned list.
    :param per_declaration: the status counts of each declaration, updated in place too.
    :return: ``items`` with tolerated FAIL results turned PASS (or dropped).
    """
    fails = Counter((r.metric_key, r.steps_key, r.constraint_key) for _, r, _ in items if r.status == FAIL)
    need = {}
    for _, r, gate in items:
        key = (r.metric_key, r.steps_key, r.constraint_key)
        if key in fails and key not in need:
            need[key] = min(min_failing_steps(gate), max(selected.get(key, 0), 1))
    tolerated = {key for key, j in fails.items() if j < need[key]}
    if not tolerated:
        return items
    kept = []
    for item in items:
        _, r, _ = item
        key = (r.metric_key, r.steps_key, r.constraint_key)
        if r.status == FAIL and key in tolerated:
            r.status = PASS
            r.reason += (f"; tolerated: {fails[key]} of the declaration's {selected.get(key, 0)} step(s) left the "
                         f"band, min_failing_steps {need[key]}")
            counts[FAIL] -= 1
            counts[PASS] += 1
            if per_declaration is not None:
                per_declaration[key][FAIL] -= 1
                per_declaration[key][PASS] += 1
            if not keep_tolerated:
                continue
        kept.append(item)
    return kept


def applies_persistence(gates: Iterable[Mapping[str, Any]]) -> bool:
    """Return whether any of a run's stored or serialized declarations switched ``min_failing_steps`` on."""
    return any(min_failing_steps(gate) != 1 for gate in gates)
