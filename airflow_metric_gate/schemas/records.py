"""marshmallow schemas of record lines (SPEC section 2), in both record formats.

``series`` lines hold one metric each::

    {"metric": "rollout/raw_reward", "series": [[0, 0.20], [1, 0.40], [2, null]]}

``rows`` lines hold one training step each (a trainer's history)::

    {"step": 3, "train/grad_norm": 0.5, "rollout/raw_reward": 0.8}

Records can hold millions of points, so the hot path never runs marshmallow per point.
:func:`decode_plain_series_line` decodes and checks a ``series`` line in one pass of msgspec's
typed JSON decoder, for the common line whose every step is an int and every value a number;
:func:`decode_series_line` does the same for lines that also hold ``null`` steps, markers or other
scalar values; :func:`load_series_line` and :func:`load_rows_line` first try a tight check built
from C-level operations.  Each of them accepts only lines the schemas accept; a line they do not accept goes
through the schema, which either accepts it or names what is wrong.  The schemas stay the one
definition of a valid line and the only source of error messages.
"""

from __future__ import annotations

from collections.abc import Iterable
from itertools import compress, count, repeat
from operator import is_, is_not, itemgetter
from typing import Annotated, Any

import msgspec
from marshmallow import EXCLUDE, INCLUDE, Schema, ValidationError, fields, post_load

from airflow_metric_gate.limits import MAX_STEP

#: Strict-JSON markers of non-finite values, decoded in value position only.
VALUE_MARKERS: dict[str, float] = {"NaN": float("nan"), "Infinity": float("inf"), "-Infinity": float("-inf")}

_NONE_TYPE = type(None)
_STEP_TYPES = frozenset({int, _NONE_TYPE})
_INT_ONLY = {int}
_PAIR_ONLY = {2}
_first = itemgetter(0)
_NO_INVALID: list[tuple[object, object]] = []  # shared, never appended to
_second = itemgetter(1)
_first_two = itemgetter(0, 1)


def _kind(value: object) -> str:
    """Name a JSON value's type the way a user who wrote the JSON would."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, (int, float)):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    if isinstance(value, dict):
        return "object"
    return type(value).__name__


def _short(value: object, limit: int = 60) -> str:
    try:
        text = repr(value)
    except RecursionError:
        text = f"<{_kind(value)} nested too deeply to show>"
    return text if len(text) <= limit else text[: limit - 3] + "..."


def decode_value(value: object) -> object:
    """Decode a non-finite marker (``"NaN"``, ``"Infinity"``, ``"-Infinity"``) to a float.

    Any other value is returned unchanged: non-numeric values are kept in the record and dropped
    later by step selection.

    :param value: a point's value as parsed from JSON.
    """
    if type(value) is str:
        return VALUE_MARKERS.get(value, value)
    return value


def check_step(step: object) -> str | None:
    """Return why ``step`` is not a valid step (an int from 0 to 2**63 - 1, or ``None``), or ``None``.

    :param step: the step as parsed from JSON.
    """
    if step is None or (type(step) is int and 0 <= step <= MAX_STEP):
        return None
    if type(step) is int and step > MAX_STEP:
        return f"step must be at most {MAX_STEP} (2**63 - 1), got {_short(step)}"
    return f"step must be an integer >= 0 or null, got {_short(step)}"


def may_hold_markers(raw: bytes) -> bool:
    """Return whether a raw line may hold a non-finite marker string.

    Three single-byte searches (``memchr`` speed): every marker holds an ``N`` or an ``I``, and a
    marker written with JSON escapes holds a backslash.  ``False`` is certain: no value of the line
    needs decoding.  ``True`` only means the decoding pass runs.

    :param raw: the line as read from the file.
    """
    return b"N" in raw or b"I" in raw or b"\\" in raw


def _fast_points(series: list, decode: bool = True) -> list[tuple[int | None, object]] | None:
    """Convert a series whose points are all valid, or return ``None`` so the schema decides.

    Built from C-level passes only (Python code runs only for the points whose value is a string,
    when ``decode`` is set).  Anything it cannot turn into a valid point makes it give up.
    """
    if not series:
        return []
    try:
        # A point that is not an array either fails here, or (a string, an object) yields items
        # that are not valid steps and fails the step check below.
        points = list(map(tuple, series))
    except TypeError:
        return None
    lengths = set(map(len, points))
    if lengths != _PAIR_ONLY:
        if min(lengths) < 2:
            return None
        points = list(map(_first_two, points))
    steps = list(map(_first, points))
    step_types = set(map(type, steps))
    if step_types != _INT_ONLY:
        if not step_types <= _STEP_TYPES:
            return None
        steps = list(compress(steps, map(is_not, steps, repeat(None))))
    if steps and (min(steps) < 0 or max(steps) > MAX_STEP):
        return None
    if decode:
        _decode_markers(points)
    return points


def _decode_markers(points: list[tuple[int | None, object]]) -> None:
    """Decode the marker values of ``points`` in place (:func:`decode_value`).

    The strings are few: they are found by C-level passes, and only their points are rebuilt.
    """
    if str in set(map(type, map(_second, points))):
        for i in compress(count(), map(is_, map(type, map(_second, points)), repeat(str))):
            step, value = points[i]
            points[i] = (step, VALUE_MARKERS.get(value, value))  # type: ignore[call-overload]  # a str, as picked


def parse_points(
    series: object, invalid: list[tuple[object, object]] | None = None
) -> list[tuple[int | None, object]]:
    """Validate a ``series`` array and return its points as ``(step, value)`` tuples.

    A point is an array of at least two items ``[step, value, ...]``; items past the second are
    ignored.  Values are decoded with :func:`decode_value`.  A step that is not an int >= 0
    (``0.0``, ``-1``, ``"3"``, ``true``) makes the point step-less, like a ``null`` step (SPEC 2):
    the point is kept with step ``None`` and ``(step as written, value)`` is appended to ``invalid``.

    :param series: the parsed ``series`` member.
    :param invalid: collects the points whose step was not an int >= 0.
    :raises ValidationError: naming the first bad point by its index.
    """
    if not isinstance(series, list):
        kind = _kind(series)
        raise ValidationError(f"must be an array of [step, value] points, got {kind} {_short(series)}")
    points = _fast_points(series)
    if points is not None:
        return points
    points = []
    for index, point in enumerate(series):
        if not isinstance(point, list) or len(point) < 2:
            raise ValidationError(
                f"point {index} must be an array [step, value] of at least 2 items, got {_short(point)}"
            )
        step, value = point[0], decode_value(point[1])
        problem = check_step(step)
        if problem:
            if type(step) is int and step > MAX_STEP:
                raise ValidationError(f"point {index}: {problem}")
            if invalid is not None:
                invalid.append((step, value))
            step = None
        points.append((step, value))
    return points


class SeriesField(fields.Field):
    """The ``series`` member: an array of ``[step, value]`` points."""

    default_error_messages = {
        "required": "missing (every line needs \"metric\" and \"series\")",
        "null": "must be an array of [step, value] points, got null",
    }

    def _deserialize(self, value: Any, attr: str | None, data: Any, **kwargs: Any) -> Any:
        invalid: list[tuple[object, object]] = []
        return parse_points(value, invalid), invalid


class UnnamedMetric:
    """A line's ``metric`` that is a number, a boolean or ``null``: no declaration can name it.

    The reference gate reads such a line and never gates it; reading skips the line with a warning.

    :param value: the ``metric`` member as written.
    """

    __slots__ = ("value",)

    def __init__(self, value: object) -> None:
        self.value = value

    def describe(self) -> str:
        """``"metric" is a number (5)``, for the warning."""
        return f"\"metric\" is {_kind(self.value)} {_short(self.value)}, not a string"


class MetricNameField(fields.Field):
    """A metric name: a string (``""`` included, as the reference gate reads it).

    A number, a boolean or ``null`` loads as :class:`UnnamedMetric` (the line is skipped with a
    warning); an array or an object is an error.

    :param kwargs: passed to marshmallow's ``Field``.
    """

    default_error_messages = {
        "required": "missing (every line needs \"metric\" and \"series\")",
    }

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(allow_none=True, **kwargs)

    def deserialize(self, value: Any, attr: str | None = None, data: Any = None, **kwargs: Any) -> Any:
        """Load ``null`` as an unnamed metric (marshmallow returns ``None`` for it without ``_deserialize``).

        :param value: the value read.
        :param attr: as marshmallow's ``Field.deserialize``.
        :param data: as marshmallow's ``Field.deserialize``.
        :param kwargs: as marshmallow's ``Field.deserialize``.
        """
        if value is None:
            return UnnamedMetric(None)
        return super().deserialize(value, attr, data, **kwargs)

    def _deserialize(self, value: Any, attr: str | None, data: Any, **kwargs: Any) -> Any:
        if isinstance(value, str):
            return value
        if isinstance(value, (bool, int, float)):
            return UnnamedMetric(value)
        raise ValidationError(f"must be a string, got {_kind(value)} {_short(value)}")


class StepField(fields.Field):
    """A step: an int >= 0 or null (bools rejected).

    :param kwargs: passed to marshmallow's ``Field``.
    """

    default_error_messages = {"required": "missing (every row needs a \"step\", which may be null)"}

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(allow_none=True, **kwargs)

    def _deserialize(self, value: Any, attr: str | None, data: Any, **kwargs: Any) -> Any:
        problem = check_step(value)
        if problem:
            raise ValidationError(problem.removeprefix("step "))
        return value


class RecordLineSchema(Schema):
    """One line of a ``series`` record: a metric and its points.

    Loads to ``{"metric": str, "series": ([(step, value), ...], invalid)}``, ``invalid`` holding
    ``(step, value)`` of the points whose step was not an int >= 0 (made step-less).  Other
    members are ignored.
    """

    error_messages = {"type": "expected a JSON object with \"metric\" and \"series\""}

    class Meta:
        unknown = EXCLUDE

    metric = MetricNameField(required=True)
    series = SeriesField(required=True)


class RowsLineSchema(Schema):
    """One line of a ``rows`` record: a step and any number of ``metric: value`` members.

    Loads to ``{"step": int | None, "values": [(metric, value), ...]}`` in member order.
    """

    error_messages = {"type": "expected a JSON object with \"step\" and metric values"}

    class Meta:
        unknown = INCLUDE

    step = StepField(required=True)

    @post_load
    def _split(self, data: dict[str, Any], **kwargs: Any) -> dict[str, Any]:
        step = data.pop("step")
        return {"step": step, "values": [(key, decode_value(value)) for key, value in data.items()]}


_SERIES_SCHEMA = RecordLineSchema()
_ROWS_SCHEMA = RowsLineSchema()


class _PlainSeriesLine(msgspec.Struct):
    """A ``series`` line whose every step is an int from 0 to 2**63 - 1 and every value a number.

    Other members are ignored, as :class:`RecordLineSchema` ignores them.  A point of more than
    two items, a ``null`` or non-int step, a value that is not a number (a marker string, a
    boolean, ``null``) or a number beyond the float range does not decode.
    """

    metric: Annotated[str, msgspec.Meta(min_length=1)]
    series: list[tuple[Annotated[int, msgspec.Meta(ge=0, le=MAX_STEP)], float]]


_PLAIN_SERIES_DECODER = msgspec.json.Decoder(_PlainSeriesLine)


class _SeriesLine(msgspec.Struct):
    """A ``series`` line whose points are pairs of a valid step (or ``null``) and a scalar value."""

    metric: Annotated[str, msgspec.Meta(min_length=1)]
    series: list[tuple[Annotated[int, msgspec.Meta(ge=0, le=MAX_STEP)] | None, float | str | bool | None]]


_SERIES_DECODER = msgspec.json.Decoder(_SeriesLine)


def decode_plain_series_line(raw: bytes) -> tuple[str, list[tuple[int, float]]] | None:
    """Decode a raw ``series`` line whose points are all plain, or return ``None``.

    Plain points have an int step from 0 to 2**63 - 1 and a finite number as value; the values come
    back as floats (step selection turns every number into a float anyway).  ``None`` means only
    that the line is not plain: it then goes through :func:`load_series_line`, which accepts it or
    says what is wrong.  A line this function accepts is one :func:`load_series_line` accepts, with
    the same metric, steps and values.

    :param raw: the line as read from the file.
    """
    try:
        line = _PLAIN_SERIES_DECODER.decode(raw)
    except (msgspec.DecodeError, RecursionError):
        return None
    return line.metric, line.series


def decode_series_line(raw: bytes, decode: bool = True) -> tuple[str, list[tuple[int | None, object]]] | None:
    """Decode a raw ``series`` line of pairs with a valid or ``null`` step and a scalar value, or return ``None``.

    For the lines that are not plain (:func:`decode_plain_series_line`) but hold no invalid step,
    no point of other than two items and no array or object as a value: a ``null`` step, a marker,
    a boolean or a ``null`` value.  The points come back as :func:`load_series_line` gives them,
    numbers as floats.  ``None`` means the line goes through :func:`load_series_line`.

    :param raw: the line as read from the file.
    :param decode: whether values may need marker decoding (see :func:`may_hold_markers`).
    """
    try:
        line = _SERIES_DECODER.decode(raw)
    except (msgspec.DecodeError, RecursionError):
        return None
    points = line.series
    if decode:
        _decode_markers(points)  # type: ignore[arg-type]  # decoded values are Point values too
    return line.metric, points  # type: ignore[return-value]  # msgspec's narrower value type, read as Points


def load_series_line(
    obj: object, decode: bool = True
) -> tuple[str, list[tuple[int | None, object]], list[tuple[object, object]]]:
    """Validate one parsed ``series`` line and return ``(metric, points, invalid)``.

    ``invalid`` lists ``(step as written, value)`` for each point whose step was not an int >= 0;
    such a point is in ``points`` with step ``None`` (see :func:`parse_points`).

    :param obj: the line as parsed by ``json.loads``.
    :param decode: whether values may need marker decoding (see :func:`may_hold_markers`);
        ``False`` skips that pass.
    :raises ValidationError: the line is invalid; ``format_errors(err.messages)`` says why.
    """
    if type(obj) is dict:
        metric = obj.get("metric")
        series = obj.get("series")
        if type(metric) is str and metric and type(series) is list:
            points = _fast_points(series, decode)
            if points is not None:
                return metric, points, _NO_INVALID
    loaded = _SERIES_SCHEMA.load(obj)  # type: ignore[arg-type]  # any JSON value: the schema refuses a non-object
    points, invalid = loaded["series"]
    return loaded["metric"], points, invalid


def load_rows_line(obj: object, decode: bool = True) -> tuple[int | None, Iterable[tuple[str, object]]]:
    """Validate one parsed ``rows`` line and return ``(step, (metric, value) pairs)``.

    The pairs may be a view of ``obj`` itself, which loses its ``step`` member.

    :param obj: the line as parsed by ``json.loads``.
    :param decode: whether values may need marker decoding (see :func:`may_hold_markers`);
        ``False`` skips that pass.
    :raises ValidationError: the line is invalid; ``format_errors(err.messages)`` says why.
    """
    if type(obj) is dict and "step" in obj:
        step = obj["step"]
        if step is None or (type(step) is int and 0 <= step <= MAX_STEP):
            del obj["step"]
            if not decode:
                return step, obj.items()
            return step, [(k, VALUE_MARKERS.get(v, v) if type(v) is str else v) for k, v in obj.items()]
    loaded = _ROWS_SCHEMA.load(obj)  # type: ignore[arg-type]  # any JSON value: the schema refuses a non-object
    return loaded["step"], loaded["values"]
