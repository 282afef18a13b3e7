"""Resolution: turning declarations as written into checked ones, and the one duplicate check (SPEC 3, 4)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import replace
from typing import Any

from marshmallow import ValidationError

from airflow_metric_gate.declarations.model import DeclarationError, GateDeclaration, canonical_key, merge_defaults
from airflow_metric_gate.limits import (
    MAX_CONSTRAINT_KEY_BYTES,
    MAX_METRIC_KEY_BYTES,
    MAX_STEPS_KEY_BYTES,
    key_problem,
)
from airflow_metric_gate.rules import RULE_OPTIONS
from airflow_metric_gate.schemas.declarations import DEFAULT_MAD_K, POLICY_NAMES, DeclarationSchema
from airflow_metric_gate.schemas.messages import first_field, format_errors

__all__ = ["collapse_duplicates", "declare", "resolve_declarations", "resolve_items", "with_policy"]


def _label(index: int | None, item: Any) -> str:
    metric = item.get("metric_key") if isinstance(item, Mapping) else None
    name = f" ({metric})" if isinstance(metric, str) and metric else ""
    return f"gate {index}{name}" if index is not None else f"gate{name}"


def _build(
    item: Any,
    schema: DeclarationSchema,
    *,
    index: int | None,
    path: str | None,
    line: int | None,
) -> GateDeclaration:
    try:
        loaded = schema.load(item)
    except ValidationError as err:
        raise DeclarationError(
            f"{_label(index, item)}: {format_errors(err.messages)}",
            path=path,
            line=line,
            field=first_field(err.messages),
        ) from None
    steps, constraint = loaded["steps"], loaded["constraint"]
    keys = (
        ("metric_key", loaded["metric_key"], MAX_METRIC_KEY_BYTES),
        ("steps", canonical_key(steps), MAX_STEPS_KEY_BYTES),
        ("constraint", canonical_key(constraint), MAX_CONSTRAINT_KEY_BYTES),
    )
    for name, key, limit in keys:
        problem = key_problem(key, limit)
        if problem:
            what = "metric_key" if name == "metric_key" else f"{name} (as the coordinate key {name}_key)"
            raise DeclarationError(
                f"{_label(index, item)}: field {what} {problem}", path=path, line=line, field=name
            )
    if line is not None:
        source = f"{path}:{line}"
    elif path is not None:
        source = f"{path}: gate {index}" if index is not None else path
    else:
        source = None
    options = {name: loaded[name] for name in RULE_OPTIONS}
    options["mad_k"] = (loaded["mad_k"] or DEFAULT_MAD_K) if loaded["band"] == "mad" else None
    options["night_mean_k"] = None if loaded["night_mean_k"] is None else float(loaded["night_mean_k"])
    return GateDeclaration(
        metric_key=loaded["metric_key"],
        steps=steps,
        constraint=constraint,
        steps_key=canonical_key(steps),
        constraint_key=canonical_key(constraint),
        enforce=loaded["enforce"],
        allowlist_reason=loaded["allowlist_reason"],
        source=source,
        **options,
    )


class _Omitted:
    def __repr__(self) -> str:
        return "<omitted>"


_OMITTED: Any = _Omitted()


def declare(
    metric_key: str,
    *,
    steps: Any = _OMITTED,
    constraint: Any = _OMITTED,
    enforce: bool = False,
    allowlist_reason: str | None = None,
    defaults: Mapping[str, Any] | None = None,
    source: str | None = None,
    min_failing_steps: int = 1,
    band: str = "rel",
    mad_k: float | None = None,
    night_mean_k: float | None = None,
    severity: str = "fail",
    policy: str | None = None,
    direction: str | None = None,
) -> GateDeclaration:
    """Declare one gate in Python.

    :param metric_key: the metric to gate.
    :param steps: ``"last"``, ``"all"`` or a non-empty list of unique steps >= 0; omit it to use
        the defaults table (passing ``None`` is an error, not an omission).
    :param constraint: a dict with keys among ``rel_up``, ``abs_floor_up``, ``rel_down``,
        ``abs_floor_down``, at least one per side, values finite and >= 0; omit it to use the
        defaults table.
    :param enforce: whether a FAIL or ERROR of this gate blocks.
    :param allowlist_reason: why a violation of this gate is tolerated, if it is.
    :param defaults: entries extending or overriding :data:`GATE_DEFAULTS`.
    :param source: where the declaration is written, used in messages.
    :param min_failing_steps: opt-in persistence rule (see :class:`GateDeclaration`).
    :param band: ``"rel"`` or the opt-in robust ``"mad"`` band (see :class:`GateDeclaration`).
    :param mad_k: the ``mad`` band's half-width in MADs (only with ``band="mad"``).
    :param night_mean_k: opt-in whole-night rule's threshold (see :class:`GateDeclaration`).
    :param severity: ``"fail"`` or ``"warn"`` (see :class:`GateDeclaration`).
    :param policy: ``"reference"`` or ``"calibrated"``; ``None``: the caller's policy applies.
    :param direction: the side on which a change is a regression (``"up"``, ``"down"``, ``"both"``);
        ``None``: the metric's default.
    :raises DeclarationError: the declaration is invalid.
    """
    item: dict[str, Any] = {"metric_key": metric_key}
    item.update(enforce=enforce, allowlist_reason=allowlist_reason)
    given = {"min_failing_steps": min_failing_steps, "band": band, "mad_k": mad_k, "night_mean_k": night_mean_k,
             "severity": severity, "policy": policy, "direction": direction}
    item.update({name: value for name, value in given.items() if value != RULE_OPTIONS[name]})  # as written
    if steps is not _OMITTED:
        item["steps"] = steps
    if constraint is not _OMITTED:
        item["constraint"] = constraint
    schema = DeclarationSchema(defaults=merge_defaults(defaults))
    return _build(item, schema, index=None, path=source, line=None)


def resolve_items(
    items: Iterable[Any],
    table: Mapping[str, Mapping[str, Any]],
    *,
    path: str | None,
    lines: list[int] | None = None,
    policy: str | None = None,
) -> list[GateDeclaration]:
    """Resolve declaration items read from one source against a merged defaults table.

    The step every source shares (gates files, ``register_ci_gate`` files, DAG files).

    :param items: mappings as written, or :class:`GateDeclaration` objects (passed through).
    :param table: the merged defaults table (:func:`merge_defaults`).
    :param path: the source, for messages.
    :param lines: the 1-based line of each item, when known.
    :param policy: the source's policy (a gates file's top-level ``policy``), for the items that set none.
    :raises DeclarationError: naming the first invalid item (1-based), its line and field.
    """
    schema = DeclarationSchema(defaults=table)
    resolved: list[GateDeclaration] = []
    for index, item in enumerate(items, 1):
        line = lines[index - 1] if lines is not None and index - 1 < len(lines) else None
        if isinstance(item, GateDeclaration):
            declaration = item
        else:
            declaration = _build(item, schema, index=index, path=path, line=line)
        resolved.append(declaration)
    return with_policy(resolved, policy)


def with_policy(declarations: Iterable[GateDeclaration], policy: str | None) -> list[GateDeclaration]:
    """Return the declarations with ``policy`` given to those that set none of their own.

    A declaration's own ``policy`` wins over its gates file's, which wins over the caller's
    (``--policy``, an operator's ``policy``); what is still unset is ``reference``.

    :param declarations: resolved declarations.
    :param policy: ``reference``, ``calibrated``, or ``None`` (leave them as they are).
    :raises DeclarationError: ``policy`` is not a policy.
    """
    if policy is None:
        return list(declarations)
    if policy not in POLICY_NAMES:
        raise DeclarationError(f"policy must be one of {', '.join(repr(p) for p in POLICY_NAMES)}, got {policy!r}",
                               field="policy")
    return [d if d.policy is not None else replace(d, policy=policy) for d in declarations]


def _place(declaration: GateDeclaration) -> str:
    return declaration.source or "a declaration given without a source"


def collapse_duplicates(declarations: Iterable[GateDeclaration]) -> tuple[list[GateDeclaration], list[str]]:
    """Collapse declarations of the same coordinate (metric, steps and constraint literals) into one.

    The one check of a coordinate declared twice (SPEC 4), whatever the declarations came from
    (gates files, DAG files, both): the first declaration is kept, each later one with the same
    ``enforce``, ``allowlist_reason`` and opt-in judging options is dropped with a warning naming
    both places; a file the reference gate accepts is never rejected for it.  A declaration with
    an empty ``metric_key`` (which the reference gate accepts) is kept with a warning naming its place.

    :param declarations: resolved declarations, in declaration order.
    :return: the declarations without duplicates, in first-seen order, and the warnings.
    :raises DeclarationError: two declarations of one coordinate differ in ``enforce``,
        ``allowlist_reason`` or an opt-in judging option (bad input: never retried); the message
        names both places.
    """
    kept: dict[tuple[str, str, str], GateDeclaration] = {}
    warnings: list[str] = []
    for declaration in declarations:
        if declaration.metric_key == "" and declaration.coordinate not in kept:
            warnings.append(f"gate at {_place(declaration)} has an empty metric_key; it is gated as written and "
                            "matches only a record metric named \"\" (usually a typo)")
        first = kept.setdefault(declaration.coordinate, declaration)
        if first is declaration:
            continue
        what = (
            f"gate {declaration.metric_key!r} with steps {declaration.steps_key} and constraint "
            f"{declaration.constraint_key}"
        )
        for name in ("enforce", "allowlist_reason", *RULE_OPTIONS):
            a, b = getattr(first, name), getattr(declaration, name)
            if a != b:
                raise DeclarationError(
                    f"{what} is declared twice with different {name}: {a!r} at {_place(first)}, {b!r} at "
                    f"{_place(declaration)}; declare it once, or make them agree",
                    field=name,
                )
        warnings.append(f"{what} is declared twice, at {_place(first)} and at {_place(declaration)}; "
                        "it is gated once")
    return list(kept.values()), warnings


def resolve_declarations(
    items: Iterable[Mapping[str, Any] | GateDeclaration],
    *,
    defaults: Mapping[str, Any] | None = None,
    source: str | None = None,
) -> list[GateDeclaration]:
    """Validate declaration mappings (as written in a DAG file) and resolve them.

    :param items: mappings with ``metric_key`` and optionally ``steps``, ``constraint``,
        ``enforce``, ``allowlist_reason``; :class:`GateDeclaration` objects pass through.
    :param defaults: entries extending or overriding :data:`GATE_DEFAULTS`.
    :param source: where the declarations are written (a DAG and task id, a file), for messages.
    :raises DeclarationError: naming the first invalid gate (1-based) and field.  A coordinate
        declared twice is kept twice here; :func:`collapse_duplicates` decides.
    """
    return resolve_items(items, merge_defaults(defaults, where=source), path=source)
