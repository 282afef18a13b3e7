"""marshmallow schemas of gate declarations and gates files (SPEC sections 3 and 4).

Every source of declarations (Python objects, YAML/JSON gates files, ``register_ci_gate`` calls in
Python test files) is validated by :class:`DeclarationSchema`, so one rule always produces one
message.  The schemas keep each field's literal *as written*: the coordinate keys
(``steps_key``, ``constraint_key``) are computed from it by :mod:`airflow_metric_gate.declarations`.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Mapping
from typing import Any

from marshmallow import RAISE, Schema, ValidationError, fields, post_load, validates_schema

from airflow_metric_gate.limits import MAX_STEP
from airflow_metric_gate.schemas.messages import format_errors

#: Constraint keys that set the upper end of the band.
UP_KEYS: tuple[str, ...] = ("rel_up", "abs_floor_up")
#: Constraint keys that set the lower end of the band.
DOWN_KEYS: tuple[str, ...] = ("rel_down", "abs_floor_down")
#: Every constraint key, in band order.
CONSTRAINT_KEYS: tuple[str, ...] = UP_KEYS + DOWN_KEYS
#: The fields of a declaration.
DECLARATION_FIELDS: tuple[str, ...] = (
    "metric_key", "steps", "constraint", "enforce", "allowlist_reason", "min_failing_steps", "band", "mad_k",
    "night_mean_k", "severity", "policy", "direction",
)
#: The values of ``band``: ``rel`` (the constraint's relative band with floors, the default) or ``mad``
#: (the history's median with a half-width of ``mad_k`` x its median absolute deviation).
BANDS: tuple[str, ...] = ("rel", "mad")
#: The values of ``severity``: ``fail`` (the default) or ``warn`` (a FAIL is reported, never blocks).
SEVERITIES: tuple[str, ...] = ("fail", "warn")
#: The values of ``policy`` (see :mod:`airflow_metric_gate.decision`).
POLICY_NAMES: tuple[str, ...] = ("reference", "calibrated")
#: The values of ``direction``: the side on which a change is a regression.
DIRECTION_NAMES: tuple[str, ...] = ("up", "down", "both")
#: ``mad_k`` when a declaration sets ``band: mad`` without it (see docs/accuracy.md for why).
DEFAULT_MAD_K = 6.0
#: The fields a defaults entry may fill when a declaration omits them.
DEFAULTABLE_FIELDS: tuple[str, ...] = ("steps", "constraint")

STEPS_RULE = 'must be "last", "all" or a non-empty list of unique ints >= 0'
CONSTRAINT_RULE = (
    f"must be a mapping with keys among {', '.join(CONSTRAINT_KEYS)} naming at least one up-side key "
    f"({' or '.join(UP_KEYS)}) and one down-side key ({' or '.join(DOWN_KEYS)})"
)


def check_steps(value: object) -> str | None:
    """Return why ``value`` is not a valid ``steps`` literal, or ``None`` when it is.

    :param value: the literal as written.
    """
    if isinstance(value, str) and value in ("last", "all"):
        return None
    if isinstance(value, (list, tuple)) and value:
        if all(type(k) is int and 0 <= k <= MAX_STEP for k in value):
            seen: set[int] = set()
            for k in value:
                if k in seen:
                    return f"{STEPS_RULE}, got {value!r} (step {k} repeats)"
                seen.add(k)
            return None
        too_large = next((k for k in value if type(k) is int and k > MAX_STEP), None)
        if too_large is not None:
            return f"{STEPS_RULE}, each at most {MAX_STEP} (2**63 - 1), got {too_large}"
    return f"{STEPS_RULE}, got {value!r}"


def _is_finite_number(value: object) -> bool:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return False
    try:
        return math.isfinite(value)
    except OverflowError:  # an int too large for a float
        return False


def check_constraint(value: object) -> list[str]:
    """Return every reason ``value`` is not a valid ``constraint`` literal (empty when valid).

    :param value: the literal as written.
    """
    if not isinstance(value, Mapping):
        return [f"{CONSTRAINT_RULE}, got {value!r}"]
    problems = []
    unknown = [k for k in value if k not in CONSTRAINT_KEYS]
    if unknown:
        problems.append(
            f"unknown key(s) {', '.join(repr(k) for k in unknown)} (allowed: {', '.join(CONSTRAINT_KEYS)})"
        )
    for side, keys in (("up-side", UP_KEYS), ("down-side", DOWN_KEYS)):
        if not any(k in value for k in keys):
            problems.append(f"must name at least one {side} key ({' or '.join(keys)}), got {dict(value)!r}")
    for key in CONSTRAINT_KEYS:
        if key in value:
            v = value[key]
            if not _is_finite_number(v) or v < 0:
                problems.append(f"{key!r} must be a finite number >= 0, got {v!r}")
    return problems


class StepsField(fields.Field):
    """``steps``: ``"last"``, ``"all"`` or a non-empty list of unique ints >= 0, in written order."""

    default_error_messages = {"null": f"{STEPS_RULE}, got None"}

    def _deserialize(self, value: Any, attr: str | None, data: Any, **kwargs: Any) -> Any:
        problem = check_steps(value)
        if problem:
            raise ValidationError(problem)
        return value if isinstance(value, str) else list(value)


class ConstraintField(fields.Field):
    """``constraint``: band parameters, each a finite number >= 0; loads to a plain dict as written."""

    default_error_messages = {"null": f"{CONSTRAINT_RULE}, got None"}

    def _deserialize(self, value: Any, attr: str | None, data: Any, **kwargs: Any) -> Any:
        problems = check_constraint(value)
        if problems:
            raise ValidationError(problems)
        return dict(value)


class StrictBooleanField(fields.Field):
    """A boolean that accepts only ``true``/``false`` (not ``1``, ``"yes"``, ...)."""

    default_error_messages = {"null": "must be true or false, got None"}

    def _deserialize(self, value: Any, attr: str | None, data: Any, **kwargs: Any) -> Any:
        if type(value) is not bool:
            raise ValidationError(f"must be true or false, got {value!r}")
        return value


class PositiveIntField(fields.Field):
    """An int >= 1 (not a bool, not a float)."""

    default_error_messages = {"null": "must be an int >= 1, got None"}

    def _deserialize(self, value: Any, attr: str | None, data: Any, **kwargs: Any) -> Any:
        if type(value) is not int or value < 1:
            raise ValidationError(f"must be an int >= 1, got {value!r}")
        return value


class PositiveNumberField(fields.Field):
    """A finite real number > 0 (not a bool)."""

    default_error_messages = {"null": "must be a finite number > 0, got None"}

    def _deserialize(self, value: Any, attr: str | None, data: Any, **kwargs: Any) -> Any:
        if not _is_finite_number(value) or value <= 0:
            raise ValidationError(f"must be a finite number > 0, got {value!r}")
        return float(value)


class ChoiceField(fields.Field):
    """One of a few strings.

    :param choices: the strings allowed.
    :param kwargs: passed to marshmallow's ``Field``.
    """

    def __init__(self, choices: tuple[str, ...], **kwargs: Any) -> None:
        self.choices = choices
        rule = f"must be one of {', '.join(repr(c) for c in choices)}"
        super().__init__(error_messages={"null": f"{rule}, got None"}, **kwargs)
        self.rule = rule

    def _deserialize(self, value: Any, attr: str | None, data: Any, **kwargs: Any) -> Any:
        if not isinstance(value, str) or value not in self.choices:
            raise ValidationError(f"{self.rule}, got {value!r}")
        return value


def check_rule_options(data: Mapping[str, Any]) -> None:
    """Refuse ``mad_k`` without ``band: mad`` (it would silently do nothing).

    :param data: a loaded declaration.
    :raises ValidationError: naming ``mad_k``.
    """
    if data.get("mad_k") is not None and data.get("band", "rel") != "mad":
        raise ValidationError(f"applies only with band: mad, got band {data.get('band', 'rel')!r}", "mad_k")


class TextField(fields.Field):
    """A string; ``non_empty`` rejects ``""``.

    :param non_empty: refuse the empty string.
    :param kwargs: passed to marshmallow's ``Field``.
    """

    def __init__(self, *, non_empty: bool = False, **kwargs: Any) -> None:
        kind = "non-empty string" if non_empty else "string"
        messages = {"null": f"must be a {kind}, got None", **(kwargs.pop("error_messages", None) or {})}
        super().__init__(error_messages=messages, **kwargs)
        self.non_empty = non_empty

    def _deserialize(self, value: Any, attr: str | None, data: Any, **kwargs: Any) -> Any:
        if not isinstance(value, str) or (self.non_empty and not value):
            raise ValidationError(f"must be a {'non-empty ' if self.non_empty else ''}string, got {value!r}")
        return value


class DefaultsEntrySchema(Schema):
    """One defaults entry: the ``steps`` and/or ``constraint`` a metric gets when a declaration omits them."""

    error_messages = {
        "unknown": f"unknown field (a defaults entry may set: {', '.join(DEFAULTABLE_FIELDS)})",
        "type": f"a defaults entry must be a mapping that may set {', '.join(DEFAULTABLE_FIELDS)}",
    }

    class Meta:
        unknown = RAISE

    steps = StepsField()
    constraint = ConstraintField()


class DefaultsTableField(fields.Field):
    """A defaults table: metric key -> :class:`DefaultsEntrySchema` entry."""

    default_error_messages = {"null": "must be a mapping of metric keys to defaults entries, got None"}

    def _deserialize(self, value: Any, attr: str | None, data: Any, **kwargs: Any) -> Any:
        return load_defaults_table(value)


def load_defaults_table(value: object) -> dict[str, dict[str, Any]]:
    """Validate a defaults table and return a plain copy of it.

    :param value: metric key -> entry (``{"steps": ..., "constraint": {...}}``, either optional).
    :raises ValidationError: naming the first bad entry and field.
    """
    if not isinstance(value, Mapping):
        raise ValidationError(f"must be a mapping of metric keys to defaults entries, got {value!r}")
    table: dict[str, dict[str, Any]] = {}
    schema = DefaultsEntrySchema()
    for metric, entry in value.items():
        if not isinstance(metric, str) or not metric:
            raise ValidationError(f"defaults entry keys must be non-empty metric keys, got {metric!r}")
        try:
            table[metric] = schema.load(entry)
        except ValidationError as err:
            raise ValidationError(f"defaults entry {metric!r}: {format_errors(err.messages)}") from None
    return table


class DeclarationSchema(Schema):
    """One gate declaration, resolved against a defaults table.

    Loads to ``{"metric_key", "steps", "constraint", "enforce", "allowlist_reason", "min_failing_steps",
    "band", "mad_k", "night_mean_k", "severity", "policy", "direction", "defaulted"}``
    where ``steps`` and ``constraint`` are the literals as written (or the defaults literal, a
    copy), and ``defaulted`` lists the fields the defaults table filled.  A field is filled only
    when *omitted*: a written value, ``None`` included, is validated as written.

    :param defaults: the defaults table (metric key -> entry) to fill omitted fields from; already
        validated.  ``None`` means an empty table.
    :param kwargs: passed to marshmallow's ``Schema``.
    """

    error_messages = {
        "unknown": f"unknown field (allowed: {', '.join(DECLARATION_FIELDS)})",
        "type": f"a gate must be a mapping of {', '.join(DECLARATION_FIELDS)}",
    }

    class Meta:
        unknown = RAISE

    # "" is accepted, as the reference gate accepts it (it matches only a metric named ""); callers warn
    metric_key = TextField(required=True, error_messages={"required": "missing (required)"})
    steps = StepsField()
    constraint = ConstraintField()
    enforce = StrictBooleanField(load_default=False)
    allowlist_reason = TextField(allow_none=True, load_default=None)
    min_failing_steps = PositiveIntField(load_default=1)
    band = ChoiceField(BANDS, load_default="rel")
    mad_k = PositiveNumberField(load_default=None)
    night_mean_k = PositiveNumberField(load_default=None)
    severity = ChoiceField(SEVERITIES, load_default="fail")
    policy = ChoiceField(POLICY_NAMES, load_default=None)
    direction = ChoiceField(DIRECTION_NAMES, load_default=None)

    @validates_schema
    def _rule_options(self, data: dict[str, Any], **kwargs: Any) -> None:
        check_rule_options(data)

    def __init__(self, *, defaults: Mapping[str, Mapping[str, Any]] | None = None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.defaults: Mapping[str, Mapping[str, Any]] = defaults if defaults is not None else {}

    @post_load
    def _fill_defaults(self, data: dict[str, Any], **kwargs: Any) -> dict[str, Any]:
        metric = data["metric_key"]
        entry = self.defaults.get(metric)
        errors: dict[str, list[str]] = {}
        defaulted = []
        for name in DEFAULTABLE_FIELDS:
            if name in data:
                continue
            if entry is None:
                errors[name] = [f"missing, and metric {metric!r} has no defaults entry to fill it"]
            elif name not in entry:
                errors[name] = [f"missing, and the defaults entry of metric {metric!r} does not set it"]
            else:
                data[name] = copy.deepcopy(entry[name])
                defaulted.append(name)
        if errors:
            raise ValidationError(errors)
        data["defaulted"] = tuple(defaulted)
        return data


class GatesFileSchema(Schema):
    """The mapping form of a YAML/JSON gates file: ``gates`` (a list) and optional ``defaults``.

    The list form (a bare list of declarations) is loaded as ``{"gates": <list>}``.  Each item of
    ``gates`` is validated afterwards by :class:`DeclarationSchema`, so that its message can name
    the gate.
    """

    error_messages = {
        "unknown": "unknown field (a gates file mapping holds: gates, defaults, policy)",
        "type": "a gates file must hold a list of gates, or a mapping with 'gates' and optional 'defaults'",
    }

    class Meta:
        unknown = RAISE

    gates = fields.Raw(required=True, error_messages={"required": "missing (the list of gate declarations)"})
    defaults = DefaultsTableField(load_default=None)
    policy = ChoiceField(POLICY_NAMES, load_default=None)

    @validates_schema
    def _gates_is_list(self, data: dict[str, Any], **kwargs: Any) -> None:
        if "gates" in data and not isinstance(data["gates"], list):
            raise ValidationError(f"must be a list of gate declarations, got {data['gates']!r}", "gates")


class GateDeclarationSchema(Schema):
    """A resolved declaration as :meth:`GateDeclaration.to_dict` writes it (XCom, JSON)."""

    class Meta:
        unknown = RAISE

    metric_key = TextField(required=True)
    steps = StepsField(required=True)
    constraint = fields.Dict(keys=fields.String(), values=fields.Float(allow_nan=False), required=True)
    steps_key = fields.String(required=True)
    constraint_key = fields.String(required=True)
    enforce = StrictBooleanField(load_default=False)
    allowlist_reason = TextField(allow_none=True, load_default=None)
    min_failing_steps = PositiveIntField(load_default=1)
    band = ChoiceField(BANDS, load_default="rel")
    mad_k = PositiveNumberField(load_default=None)
    night_mean_k = PositiveNumberField(load_default=None)
    severity = ChoiceField(SEVERITIES, load_default="fail")
    policy = ChoiceField(POLICY_NAMES, load_default=None)
    direction = ChoiceField(DIRECTION_NAMES, load_default=None)
    source = fields.String(allow_none=True, load_default=None)

    @validates_schema
    def _rule_options(self, data: dict[str, Any], **kwargs: Any) -> None:
        check_rule_options(data)

    @validates_schema
    def _constraint_keys(self, data: dict[str, Any], **kwargs: Any) -> None:
        constraint = data.get("constraint")
        if constraint is not None and sorted(constraint) != sorted(CONSTRAINT_KEYS):
            raise ValidationError(f"must hold exactly {', '.join(CONSTRAINT_KEYS)}", "constraint")
