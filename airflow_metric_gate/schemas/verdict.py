"""marshmallow schema of the verdict (SPEC section 10), for consumers that read it back from XCom or JSON."""

from __future__ import annotations

from marshmallow import Schema, fields, validate

from airflow_metric_gate.enums import ROLES, STATUSES
from airflow_metric_gate.verdict import VERDICT_SCHEMA


class ResultSchema(Schema):
    """One coordinate's result."""

    metric_key = fields.String(required=True)
    steps_key = fields.String(required=True)
    constraint_key = fields.String(required=True)
    step = fields.Integer(required=True, allow_none=True)
    at_step = fields.Integer(required=True, allow_none=True)
    status = fields.String(required=True, validate=validate.OneOf(STATUSES))
    current = fields.Float(required=True, allow_none=True)
    ref = fields.Float(required=True, allow_none=True)
    n = fields.Integer(required=True, validate=validate.Range(min=0))
    lo = fields.Float(required=True, allow_none=True)
    hi = fields.Float(required=True, allow_none=True)
    side = fields.String(required=True, allow_none=True, validate=validate.OneOf(["above", "below"]))
    bound = fields.String(required=True, allow_none=True,
                          validate=validate.OneOf(["rel", "abs_floor", "mad", "night_mean", "calibrated", "night",
                                                   "drift", "blowup", "improvement", "constraint", "shape"]))
    reason = fields.String(required=True)
    allowlist_reason = fields.String(allow_none=True)
    severity = fields.String(validate=validate.OneOf(["warn"]))
    blocking = fields.Boolean()
    policy = fields.String(validate=validate.OneOf(["calibrated"]))


class CountsSchema(Schema):
    """How many results of each status."""

    PASS = fields.Integer(required=True)
    FAIL = fields.Integer(required=True)
    INACTIVE = fields.Integer(required=True)
    ERROR = fields.Integer(required=True)


class WorstSchema(Schema):
    """The FAIL of a declaration that lies farthest outside its band."""

    step = fields.Integer(required=True, allow_none=True)
    at_step = fields.Integer(required=True, allow_none=True)
    current = fields.Float(required=True)
    ref = fields.Float(required=True)
    lo = fields.Float(required=True)
    hi = fields.Float(required=True)
    side = fields.String(required=True, validate=validate.OneOf(["above", "below"]))
    bound = fields.String(required=True, validate=validate.OneOf(["rel", "abs_floor", "mad", "calibrated", "blowup",
                                                                     "constraint"]))
    distance = fields.Float(required=True, validate=validate.Range(min=0))


class NightSchema(Schema):
    """A declaration's whole-night FAIL (the opt-in ``night_mean_k``)."""

    statistic = fields.Float(required=True)
    night_mean_k = fields.Float(required=True)
    steps = fields.Integer(required=True, validate=validate.Range(min=1))
    side = fields.String(required=True, validate=validate.OneOf(["above", "below"]))
    distance = fields.Float(required=True, validate=validate.Range(min=0))


class SummarySchema(Schema):
    """One declaration with any FAIL or ERROR."""

    metric_key = fields.String(required=True)
    steps_key = fields.String(required=True)
    constraint_key = fields.String(required=True)
    counts = fields.Nested(CountsSchema, required=True)
    first_failing_step = fields.Integer(required=True, allow_none=True)
    last_failing_step = fields.Integer(required=True, allow_none=True)
    side = fields.String(required=True, allow_none=True, validate=validate.OneOf(["above", "below", "both"]))
    worst = fields.Nested(WorstSchema, required=True, allow_none=True)
    error = fields.String(required=True, allow_none=True)
    night = fields.Nested(NightSchema)
    calibrated_night = fields.Dict()
    severity = fields.String(validate=validate.OneOf(["warn"]))


class VerdictSchema(Schema):
    """The versioned verdict; v1 only ever gains fields."""

    schema = fields.String(required=True, validate=validate.Equal(VERDICT_SCHEMA))
    series = fields.String(required=True)
    backend = fields.String(required=True)
    suite = fields.String(required=True)
    run_id = fields.String(required=True)
    role = fields.String(required=True, validate=validate.OneOf(ROLES))
    logical_date = fields.String(required=True)
    trusted = fields.Boolean(required=True)
    enforced = fields.Boolean(required=True)
    blocking = fields.Integer(load_default=0)
    counts = fields.Nested(CountsSchema, required=True)
    summary = fields.List(fields.Nested(SummarySchema), load_default=list)
    results = fields.List(fields.Nested(ResultSchema), required=True)
    truncated = fields.Integer(required=True, validate=validate.Range(min=0))
    # beyond SPEC 10, each present only when it has something to say (see verdict.calibrated_sections)
    policy = fields.String(validate=validate.OneOf(["calibrated", "mixed"]))
    declarations = fields.List(fields.Dict())
    level_shifts = fields.List(fields.Dict())
    drifts = fields.List(fields.Dict())
    within_night = fields.List(fields.Dict())
    improvements = fields.List(fields.Dict())
    blowups = fields.List(fields.Dict())
    starved = fields.List(fields.Dict())
    #: Present when the record lost points (values that are not numbers) or lines no gate can read.
    warnings = fields.List(fields.Dict(keys=fields.String()))
