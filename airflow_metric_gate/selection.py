"""Step selection: turn a record and gate declarations into the values to store (SPEC section 5).

A declaration selects either the last numeric point (stored at step ``-1``), every numeric point, or
an explicit list of steps.  Anything that makes a declaration unusable yields one ERROR selection for
the whole declaration and no values, so a broken metric is reported instead of silently skipped.
"""

from __future__ import annotations

import difflib
import json
import math
from collections.abc import Iterable, Mapping, Sequence
from operator import itemgetter

from airflow_metric_gate.declarations import GateDeclaration, collapse_duplicates
from airflow_metric_gate.memory import gc_paused
from airflow_metric_gate.records import Columns, Record

#: The step under which ``steps="last"`` values are stored, whatever their real step was.
LAST_STEP = -1


class Selection:
    """The values one declaration selected from a record, or why it could not select any.

    Values are kept as parallel lists (stored step, value, real step), the form they are stored and
    sent through XCom in; :attr:`points` gives them as triples.

    :param declaration: the resolved declaration.
    :param points: ``(stored_step, value, at_step)`` triples in selection order; ``at_step`` is the
        point's real step (it differs from ``stored_step`` only under ``"last"``).
    :param error: why the declaration selected nothing, or ``None``.
    :param steps: instead of ``points``: the stored steps.
    :param values: instead of ``points``: the values, parallel to ``steps``.
    :param at_steps: instead of ``points``: the real steps (default: ``steps``).
    """

    __slots__ = ("declaration", "steps", "values", "at_steps", "error")

    def __init__(
        self,
        declaration: GateDeclaration,
        points: Sequence[tuple[int, float, int | None]] | None = None,
        error: str | None = None,
        *,
        steps: list[int] | None = None,
        values: list[float] | None = None,
        at_steps: Sequence[int | None] | None = None,
    ) -> None:
        if points is not None:
            steps = [p[0] for p in points]
            values = [p[1] for p in points]
            at_steps = [p[2] for p in points]
        self.declaration = declaration
        self.steps: list[int] = steps if steps is not None else []
        self.values: list[float] = values if values is not None else []
        self.at_steps: Sequence[int | None] = at_steps if at_steps is not None else self.steps
        self.error = error

    @property
    def points(self) -> list[tuple[int, float, int | None]]:
        """The selected values as ``(stored_step, value, at_step)`` triples."""
        return list(zip(self.steps, self.values, self.at_steps))

    def __len__(self) -> int:
        return len(self.steps)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Selection):
            return NotImplemented
        return (self.declaration, self.steps, self.values, self.at_steps, self.error) == (
            other.declaration, other.steps, other.values, other.at_steps, other.error)

    def __repr__(self) -> str:
        state = f"error={self.error!r}" if self.error else f"{len(self.steps)} value(s)"
        return f"Selection({self.declaration.metric_key!r}, {state})"


def is_numeric(value: object) -> bool:
    """Return whether a record value counts as a number (bools do not).

    :param value: a record value.
    """
    return (type(value) is float or type(value) is int) and not isinstance(value, bool)


_NUMBER_TYPES = {float, int}
_step = itemgetter(0)
_value = itemgetter(1)


def _as_float(value: float) -> float:
    """``float(value)``, with an integer beyond the float range as an infinity of its sign."""
    try:
        return float(value)
    except OverflowError:
        return math.inf if value > 0 else -math.inf


def _numeric_points(points: list[tuple[int | None, object]]) -> list[tuple[int | None, float]]:
    kinds = set(map(type, map(_value, points)))
    if kinds == {float}:  # the common case: nothing to drop, nothing to convert
        return points  # type: ignore[return-value]  # every value is a float, as kinds shows
    # the values converted are numbers (kinds, is_numeric), which the element type cannot say
    try:
        if kinds <= _NUMBER_TYPES:
            return [(step, float(value)) for step, value in points]  # type: ignore[arg-type]  # numbers
        return [(step, float(value)) for step, value in points if is_numeric(value)]  # type: ignore[arg-type]  # same
    except OverflowError:  # an integer beyond the float range: not finite, like 1e400
        return [(step, _as_float(value)) for step, value in points if is_numeric(value)]  # type: ignore[arg-type]  # same


def _fmt_step(step: int | None) -> str:
    return "null" if step is None else str(step)


_Columns = tuple[list, list, list]
_NONE: _Columns = ([], [], [])


def _select_last(numeric: list[tuple[int | None, float]]) -> tuple[_Columns, str | None]:
    step, value = numeric[-1]
    if not math.isfinite(value):
        return _NONE, f"last numeric point (step {_fmt_step(step)}) is not finite: {value!r}"
    return ([LAST_STEP], [value], [step]), None


_NO_STEP_UNDER_ALL = 'a numeric point has no step (null) under steps "all"'


def _select_all(numeric: list[tuple[int | None, float]]) -> tuple[_Columns, str | None]:
    steps = list(map(_step, numeric))
    values = list(map(_value, numeric))
    if None in steps:
        return _NONE, _NO_STEP_UNDER_ALL
    if len(set(steps)) != len(steps):
        seen: set[int] = set()
        duplicate = next(s for s in steps if s in seen or seen.add(s))  # type: ignore[func-returns-value]  # add() records it
        return _NONE, f'step {duplicate} appears more than once under steps "all"'
    if not all(map(math.isfinite, values)):
        step, value = next((s, v) for s, v in numeric if not math.isfinite(v))
        return _NONE, f"step {step} is not finite: {value!r}"
    return (steps, values, steps), None


def _select_listed(
    numeric: list[tuple[int | None, float]], wanted: Sequence[int], dropped: Mapping[int, str] | None = None
) -> tuple[_Columns, str | None]:
    by_step: dict[int, float] = {}
    for step, value in numeric:
        if step is None:
            continue
        if step in by_step:
            return _NONE, f"step {step} appears more than once among numeric points"
        by_step[step] = value
    missing = [k for k in wanted if k not in by_step]
    if missing:
        dropped = dropped or {}
        absent = [k for k in missing if k not in dropped]
        said = [f"listed step {k}: {dropped[k]}" for k in missing if k in dropped]
        if absent:
            said.append(f"listed step(s) {', '.join(map(str, absent))} missing from the record")
        return _NONE, "; ".join(said)
    steps = list(wanted)
    values = [by_step[k] for k in steps]
    for k, value in zip(steps, values):
        if not math.isfinite(value):
            return _NONE, f"step {k} is not finite: {value!r}"
    return (steps, values, steps), None


def _invalid_step_note(notes: list[tuple[object, object, str, int]]) -> str:
    """Name the numeric points whose step was not an int >= 0: they count as points without a step."""
    numeric = [n for n in notes if is_numeric(n[1])] or notes
    step, value, path, line = numeric[0]
    try:
        point = json.dumps([step, value])
    except (TypeError, ValueError):
        point = repr([step, value])
    more = f" (and {len(numeric) - 1} more such point(s))" if len(numeric) > 1 else ""
    where = f"line {line}" if isinstance(line, int) else line  # a log's own position: "event record 3"
    return (f"point {point} ({path} {where}) has a step that is not an int >= 0, so it counts as a point "
            f"without a step{more}")


def _select_columns(declaration: GateDeclaration, columns: Columns) -> Selection | None:
    """Select from a metric read as :class:`Columns`, or return ``None`` when the selection fails.

    Columns hold only int steps and finite float values, so no point is dropped, none lacks a step
    and none is non-finite: what is left to check runs over whole columns in C.  The selection
    shares the record's lists (neither is ever changed).  Whenever the selection would be an ERROR
    the general path of :func:`select_declaration` runs instead and words the reason.
    """
    steps, values = columns.steps, columns.values
    if not steps:
        return None
    wanted = declaration.steps
    if wanted == "all":
        if not columns.distinct and len(set(steps)) != len(steps):
            return None
        return Selection(declaration, steps=steps, values=values, at_steps=steps)
    if wanted == "last":
        return Selection(declaration, steps=[LAST_STEP], values=[values[-1]], at_steps=[steps[-1]])
    if isinstance(wanted, str):  # no other word: the general path words the error
        return None
    by_step = dict(zip(steps, values))
    if len(by_step) != len(steps):
        return None
    try:
        listed = [by_step[k] for k in wanted]
    except KeyError:
        return None
    listed_steps = list(wanted)
    return Selection(declaration, steps=listed_steps, values=listed, at_steps=listed_steps)


def _json_text(value: object) -> str:
    """A record value as it was written (JSON), for messages."""
    try:
        return json.dumps(value)
    except (TypeError, ValueError):
        return repr(value)


def _place(path: str, line: int | str) -> str:
    return f"{path} line {line}" if isinstance(line, int) else f"{path} {line}"  # a log's own phrase


def _dropped_at(record: Record, metric: str, wanted: Sequence[int]) -> dict[int, str]:
    """Say, for each listed step whose only points have a value that is not a number, why it has no value."""
    listed = set(wanted)
    values: dict[int, object] = {}
    for step, value in record[metric]:
        if step in listed and not is_numeric(value):
            values[step] = value
    if not values:
        return {}
    where = {n[0]: (n[2], n[3]) for n in getattr(record, "dropped", {}).get(metric, ()) if n[0] in values}
    said = {}
    for step, value in values.items():
        place = f" ({_place(*where[step])})" if step in where else ""
        said[step] = f"its value {_json_text(value)}{place} is not a number, so the point was dropped"
    return said


def _not_a_number(record: Record, metric: str, steps: object) -> str | None:
    """Under the calibrated policy a value that is not a number is an ERROR, never a dropped point.

    ``"all"``: any such point; ``"last"``: when the last point is one; a steps list: when a listed
    step's point is one (the listed-step error of :func:`_select_listed` says so already).
    """
    notes = getattr(record, "dropped", {}).get(metric, ())
    count = getattr(record, "dropped_count", {}).get(metric, len(notes))
    if steps == "last":
        points = record.last_line(metric) if hasattr(record, "last_line") and record.last_line(metric) else None
        points = points if points is not None else record[metric]
        if not points or is_numeric(points[-1][1]):
            return None
        step, value = points[-1][0], points[-1][1]
        where = next((f" ({_place(n[2], n[3])})" for n in notes if n[0] == step and n[1] is value), "")
        return (f"metric {metric!r}: the last point, step {_fmt_step(step)}, has the value {_json_text(value)}"
                f"{where}, which is not a number (policy calibrated: an ERROR, not a dropped point)")
    if steps != "all" or not notes:
        return None
    step, value, path, line = notes[0]
    more = f"; {count - 1} more such point(s)" if count > 1 else ""
    return (f"metric {metric!r}: step {_fmt_step(step)} has the value {_json_text(value)} ({_place(path, line)}), "
            f"which is not a number (policy calibrated: an ERROR, not a dropped point){more}")


def _did_you_mean(record: Record, metric: str) -> str:
    """``"; did you mean 'name'?"`` when the record holds a metric named close to ``metric``, else ``""``."""
    names = [name for name in record if isinstance(name, str)]
    close = difflib.get_close_matches(metric, names, n=1, cutoff=0.8)
    return f"; did you mean {close[0]!r}?" if close else ""


def select_declaration(record: Record, declaration: GateDeclaration) -> Selection:
    """Select the values one declaration asks for.

    :param record: the ingested record.
    :param declaration: the resolved declaration.
    :return: a :class:`Selection` holding values, or an error and no values.
    """
    metric = declaration.metric_key
    if metric not in record:
        hint = _did_you_mean(record, metric)
        return Selection(declaration, error=f"metric {metric!r} is absent from the record{hint}")
    steps = declaration.steps
    if declaration.policy == "calibrated" and getattr(record, "dropped_count", {}).get(metric):
        error = _not_a_number(record, metric, steps)
        if error:
            return Selection(declaration, error=error)
    last_line = record.last_line(metric) if steps == "last" and hasattr(record, "last_line") else None
    if last_line is not None:  # a metric on several lines: "last" is the last point of the last line (SPEC 11)
        numeric = _numeric_points(last_line)
    else:
        columns = record.columns(metric)
        if columns is not None:
            selection = _select_columns(declaration, columns)
            if selection is not None:
                return selection
        numeric = _numeric_points(record[metric])
    if not numeric:
        return Selection(declaration, error=f"metric {metric!r} has no numeric point")
    if steps == "last":
        picked, error = _select_last(numeric)
    elif steps == "all":
        picked, error = _select_all(numeric)
    else:  # steps is a tuple of steps, which comparing with the two words does not tell the type checker
        dropped = (_dropped_at(record, metric, steps)  # type: ignore[arg-type]  # a tuple
                   if getattr(record, "dropped_count", {}).get(metric) else None)
        picked, error = _select_listed(numeric, steps, dropped)  # type: ignore[arg-type]  # a tuple
    if error:
        notes = getattr(record, "invalid_steps", {}).get(metric)
        if notes and (error == _NO_STEP_UNDER_ALL or (isinstance(steps, tuple) and error.startswith("listed"))):
            error += "; " + _invalid_step_note(notes)
        return Selection(declaration, error=f"metric {metric!r}: {error}")
    return Selection(declaration, steps=picked[0], values=picked[1], at_steps=picked[2])


def select_steps(record: Record, declarations: Iterable[GateDeclaration]) -> list[Selection]:
    """Select values for every declaration, in declaration order.

    :param record: the ingested record.
    :param declarations: resolved declarations; a coordinate declared twice (same metric, steps
        literal and constraint literal) is selected once (:func:`collapse_duplicates`; callers
        report its warnings).
    :raises DeclarationError: a coordinate declared twice with different ``enforce`` or
        ``allowlist_reason``.
    """
    unique, _warnings = collapse_duplicates(declarations)
    with gc_paused():  # selection builds one small tuple per value, none of them cyclic
        return [select_declaration(record, declaration) for declaration in unique]


#: At most this many warnings go into a verdict (the rest are counted in the last one).
MAX_WARNINGS = 50


def more_warnings(count: int) -> dict:
    """The last warning entry, counting those left out.

    :param count: how many were left out.
    """
    return {"kind": "more", "count": count, "message": f"{count} more warning(s) not listed"}


def dropped_warnings(record: Record, declarations: Iterable[GateDeclaration]) -> list[dict]:
    """Return the warnings of a night: the points its declarations' metrics lost, and what reading noted.

    Under the reference decision a point whose value is not a number (``null``, a boolean, a
    string other than the markers) is dropped by selection, and the statuses stay what the
    reference decides; every such point is reported here instead of vanishing: its metric, step,
    value as written, file and line.  Then the warnings of reading (:attr:`Record.warnings`).
    At most :data:`MAX_WARNINGS` entries; a last entry counts the rest.

    Each entry: ``{"kind": "dropped_value", "metric_key", "step", "value", "file", "line",
    "message"}``, ``{"kind": "record", "message"}``, or last ``{"kind": "more", "count", "message"}``.

    :param record: the record read.
    :param declarations: the night's declarations.
    """
    warnings: list[dict] = []
    more = 0
    seen: set[str] = set()
    dropped = getattr(record, "dropped", {})
    counts = getattr(record, "dropped_count", {})
    for declaration in declarations:
        metric = declaration.metric_key
        if metric in seen or metric not in dropped:
            continue
        seen.add(metric)
        notes = dropped[metric]
        for step, value, path, line in notes:
            if len(warnings) >= MAX_WARNINGS:
                more += 1
                continue
            text = _json_text(value)
            warnings.append({
                "kind": "dropped_value", "metric_key": metric, "step": step if type(step) is int else None,
                "value": text, "file": path, "line": line,
                "message": (f"metric {metric!r} step {_fmt_step(step)}: value {text} ({_place(path, line)}) is not a "
                            "number; the point was dropped"),
            })
        more += counts.get(metric, len(notes)) - len(notes)
    for message in getattr(record, "warnings", ()):
        if len(warnings) >= MAX_WARNINGS:
            more += 1
            continue
        warnings.append({"kind": "record", "message": message})
    more += getattr(record, "warning_count", 0) - len(getattr(record, "warnings", ()))
    if more > 0:
        warnings.append(more_warnings(more))
    return warnings
