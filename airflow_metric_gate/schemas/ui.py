"""marshmallow schemas of the "Metric gate" UI's inputs: every query string and form is loaded here.

Unknown parameters are ignored (the Airflow UI may add its own); the known ones are checked for
type and length before any query runs, and are only ever bound as SQL parameters.
"""

from __future__ import annotations

import json

from marshmallow import EXCLUDE, Schema, ValidationError, fields, post_load, validate, validates_schema

from airflow_metric_gate.enums import JUDGED_STATUSES
from airflow_metric_gate.limits import MAX_STEP

_NAME = validate.Length(min=1, max=250)
_KEY = validate.Length(min=1, max=2000)
#: The largest map index Airflow stores (its column is a 32-bit integer).
MAX_MAP_INDEX = 2**31 - 1


class Text(fields.String):
    """A string that holds no NUL character and no lone surrogate: what neither store can hold or compare."""

    def _deserialize(self, value, attr, data, **kwargs):  # noqa: ANN001, ANN202
        text = super()._deserialize(value, attr, data, **kwargs)
        if "\x00" in text:
            raise ValidationError("must not hold a NUL character")
        try:
            text.encode("utf-8")
        except UnicodeEncodeError as exc:
            raise ValidationError("must be valid UTF-8 text") from exc
        return text
#: What the Airflow UI leaves in an external view's ``href`` when the page has no map index.
MAP_INDEX_PLACEHOLDER = "{MAP_INDEX}"
_DECLARATION = "must be a JSON list [metric_key, steps_key, constraint_key]"


class MapIndex(fields.Field):
    """A task's map index: an integer >= -1; empty or the UI's unfilled placeholder mean -1."""

    def _deserialize(self, value, attr, data, **kwargs):  # noqa: ANN001, ANN202
        if value in (None, "", MAP_INDEX_PLACEHOLDER):
            return -1
        try:
            number = int(value)
        except (TypeError, ValueError) as exc:
            raise ValidationError("must be an integer") from exc
        if number < -1 or number > MAX_MAP_INDEX:
            raise ValidationError(f"must be from -1 to {MAX_MAP_INDEX}")
        return number


class _Base(Schema):
    class Meta:
        unknown = EXCLUDE


class TaskQuerySchema(_Base):
    """``task``: the task instance whose verdict to show."""

    dag_id = Text(required=True, validate=_NAME)
    run_id = Text(required=True, validate=_NAME)
    task_id = Text(required=True, validate=_NAME)
    map_index = MapIndex(load_default=-1)
    nights = fields.Integer(load_default=30, validate=validate.Range(min=2, max=365))


class SeriesQuerySchema(_Base):
    """``series``: a series identity, a page of its runs, and the coordinate to chart."""

    series = Text(required=True, validate=_NAME)
    backend = Text(required=True, validate=_NAME)
    suite = Text(required=True, validate=_NAME)
    page = fields.Integer(load_default=1, validate=validate.Range(min=1, max=100_000))
    declaration = Text(load_default=None, validate=_KEY)
    step = fields.Integer(load_default=None, validate=validate.Range(min=-1, max=MAX_STEP))
    nights = fields.Integer(load_default=60, validate=validate.Range(min=2, max=365))

    @post_load
    def _split_declaration(self, data: dict, **kwargs: object) -> dict:
        raw = data.pop("declaration")
        data["metric_key"] = data["steps_key"] = data["constraint_key"] = None
        if raw is None:
            return data
        try:
            parts = json.loads(raw)
        except (ValueError, RecursionError) as exc:
            raise ValidationError({"declaration": [_DECLARATION]}) from exc
        if not (isinstance(parts, list) and len(parts) == 3 and all(isinstance(p, str) and p for p in parts)):
            raise ValidationError({"declaration": [_DECLARATION]})
        data["metric_key"], data["steps_key"], data["constraint_key"] = parts
        return data


class MarkFormSchema(_Base):
    """``mark``: mark one store run trusted or untrusted, with a reason."""

    run_id = Text(required=True, validate=_NAME)
    status = Text(required=True, validate=validate.OneOf(JUDGED_STATUSES))
    reason = Text(required=True, validate=validate.Length(min=3, max=500))
    token = Text(required=True, validate=validate.Length(min=1, max=200))
    next = Text(load_default="./", validate=validate.Length(max=4000))

    @validates_schema
    def _reason_and_next(self, data: dict, **kwargs: object) -> None:
        if not data.get("reason", "").strip():
            raise ValidationError({"reason": ["a reason is required"]})
        nxt = data.get("next") or "./"
        # Only a page of this plugin: no scheme, no host, no absolute path (no open redirect).
        if not (nxt == "./" or nxt.startswith(("series?", "task?"))) or "\\" in nxt or "//" in nxt:
            raise ValidationError({"next": ["must be a page of this view"]})


class AcceptFormSchema(_Base):
    """``accept``: accept a series' new level from the first night of a reported level shift, with a reason."""

    run_id = Text(required=True, validate=_NAME)
    since = Text(required=True, validate=_NAME)
    reason = Text(required=True, validate=validate.Length(min=3, max=500))
    token = Text(required=True, validate=validate.Length(min=1, max=200))
    next = Text(load_default="./", validate=validate.Length(max=4000))

    @validates_schema
    def _reason_and_next(self, data: dict, **kwargs: object) -> None:
        MarkFormSchema._reason_and_next(self, data)  # the same rules: a reason, a page of this view
