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

The options are listed once, in :data:`RULE_OPTIONS`; each is stored with a run's declarations
only when switched on (:func:`rule_options`).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from typing import Any

from airflow_metric_gate.enums import FAIL, PASS
from airflow_metric_gate.schemas.declarations import DEFAULT_MAD_K

__all__ = ["RULE_OPTIONS", "SUMMARY_FIELDS", "applies_persistence", "declaration_summary", "is_warning", "mad_k",
           "min_failing_steps", "night_mean_k", "rule_options", "tolerate_isolated_failures"]

#: The opt-in judging options, the one list of them, each with its default value.  An option is
#: stored with a run's declarations and serialized only when it differs from its default
#: (:func:`rule_options`), and two declarations of one coordinate must agree on every one
#: (:func:`~airflow_metric_gate.declarations.collapse_duplicates`).
RULE_OPTIONS: dict[str, Any] = {"min_failing_steps": 1, "band": "rel", "mad_k": None, "night_mean_k": None,
                                "severity": "fail", "policy": None, "direction": None}

#: The other fields of a declaration as it is stored with a run (:func:`declaration_summary`).
SUMMARY_FIELDS: tuple[str, ...] = ("metric_key", "steps_key", "constraint_key", "constraint", "enforce",
                                   "allowlist_reason")


def min_failing_steps(gate: Mapping[str, Any]) -> int:
    """Return a stored or serialized declaration's ``min_failing_steps`` (1 when absent).

    :param gate: a stored or serialized declaration.
    """
    return int(gate.get("min_failing_steps") or 1)


def mad_k(gate: Mapping[str, Any]) -> float | None:
    """Return a stored or serialized declaration's ``mad_k`` when it has ``band: mad``, else ``None``.

    :param gate: a stored or serialized declaration.
    """
    return float(gate.get("mad_k") or DEFAULT_MAD_K) if gate.get("band") == "mad" else None


def night_mean_k(gate: Mapping[str, Any]) -> float | None:
    """Return a stored or serialized declaration's ``night_mean_k`` (``None``: the whole-night rule is off).

    :param gate: a stored or serialized declaration.
    """
    k = gate.get("night_mean_k")
    return None if k is None else float(k)


def is_warning(gate: Mapping[str, Any]) -> bool:
    """Return whether a stored or serialized declaration has ``severity: warn`` (its failures never block).

    :param gate: a stored or serialized declaration.
    """
    return gate.get("severity") == "warn"


def _getter(gate: Any) -> Any:
    """Read a field of a stored or serialized declaration (a mapping) or of a ``GateDeclaration``."""
    if isinstance(gate, Mapping):
        return gate.get
    return lambda name, default: getattr(gate, name, default)


def rule_options(gate: Any) -> dict[str, Any]:
    """Return the opt-in judging options a declaration switched on: those that differ from their default.

    The one reading of :data:`RULE_OPTIONS`, for a stored or serialized declaration (a mapping) as
    for a :class:`~airflow_metric_gate.declarations.GateDeclaration`: what is stored with a run's
    declarations and serialized, so default declarations read as before.

    :param gate: the declaration.
    """
    get = _getter(gate)
    out: dict[str, Any] = {}
    for name, default in RULE_OPTIONS.items():
        value = get(name, default)
        if value is not None and value != default:
            out[name] = value
    return out


def declaration_summary(gate: Any) -> dict[str, Any]:
    """Return a declaration as it is stored with a run (what evaluation and replay judge with).

    :param gate: a :class:`~airflow_metric_gate.declarations.GateDeclaration`, or a stored or
        serialized declaration (a mapping).
    """
    get = _getter(gate)
    out = {name: get(name, None) for name in SUMMARY_FIELDS}
    out["constraint"] = dict(out["constraint"] or {})
    out["enforce"] = bool(out["enforce"])
    out.update(rule_options(gate))  # opt-in rules are stored only when switched on
    return out


def tolerate_isolated_failures(
    items: list[tuple[Any, Any, Mapping[str, Any]]], counts: dict[str, int], selected: Counter, *,
    keep_tolerated: bool, per_declaration: Mapping[tuple[str, str, str], dict[str, int]] | None = None,
    fails: Counter | None = None,
) -> list[tuple[Any, Any, Mapping[str, Any]]]:
    """Apply ``min_failing_steps`` to one run's results.

    :param items: ``(ordinal, result, gate)`` for every FAIL result of the run (and any others);
        ``result`` has ``status``, ``reason`` and the coordinate keys; ``gate`` the declaration.
    :param counts: the run's status counts, updated in place.
    :param selected: ``(metric_key, steps_key, constraint_key)`` -> how many coordinates the
        declaration has in the run.
    :param keep_tolerated: keep the tolerated results (now PASS) in the returned list.
    :param per_declaration: the status counts of each declaration, updated in place too.
    :param fails: how many FAIL results each declaration has, when ``items`` holds only some of
        them (at least one of each declaration with any); by default counted from ``items``.
    :return: ``items`` with tolerated FAIL results turned PASS (or dropped).
    """
    if fails is None:
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
    """Return whether any of a run's stored or serialized declarations switched ``min_failing_steps`` on.

    :param gates: the run's declarations.
    """
    return any(min_failing_steps(gate) != 1 for gate in gates)
