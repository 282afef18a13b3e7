"""The record as read: :class:`Record`, its :class:`Columns`, :class:`RecordError` and the reading limits.

See also :func:`airflow_metric_gate.records.read_record`, which builds a :class:`Record`.
"""

from __future__ import annotations

from collections.abc import Iterator
from operator import itemgetter

from airflow_metric_gate.enums import RecordFormat
from airflow_metric_gate.errors import LocatedError

#: The record formats :func:`read_record` understands.
RECORD_FORMATS = RecordFormat.values()

Point = tuple[int | None, object]
#: A point whose step was not an int >= 0: ``(step as written, value, file, line)``; for an event
#: file or an MLflow run the position is a phrase such as ``"event record 3"``.
InvalidStep = tuple[object, object, str, int | str]
#: A point whose value is not a number (selection drops it): ``(step, value, file, line)``; for an
#: event file or an MLflow run the position is a phrase, as for :data:`InvalidStep`.
DroppedPoint = tuple[object, object, str, int | str]
#: At most this many dropped points of one metric are kept with their file and line (all are counted).
MAX_DROPPED_NOTES = 20
#: At most this many reading warnings are kept (all are counted in :attr:`Record.warning_count`).
MAX_READ_WARNINGS = 50


class RecordError(LocatedError):
    """A record cannot be read; the message names the file and line.

    :param message: what is wrong.
    :param path: the file (or location) concerned, if any.
    :param line: the 1-based line number, if any.
    """


class Columns:
    """A metric's points as two parallel lists: every step an int from 0 to 2**63 - 1, every value a finite float.

    Most metrics of a record look like this; keeping them as columns builds no object per point
    that outlives reading (so the garbage collector never walks them), and step selection takes its
    columns from here directly.

    :param steps: the steps, in point order.
    :param values: the values, parallel to ``steps``.
    :param distinct: ``True`` when the steps are known to be distinct; ``False`` says nothing.
    """

    __slots__ = ("steps", "values", "distinct")

    def __init__(self, steps: list[int], values: list[float], distinct: bool = False) -> None:
        self.steps = steps
        self.values = values
        self.distinct = distinct

    @classmethod
    def from_points(cls, points: list[tuple[int, float]], like: Columns | None = None) -> Columns:
        """Build columns from ``(step, value)`` points whose steps are ints and values finite floats.

        :param like: columns read before, typically another metric's: when their steps are the
            same, the new columns take a copy of that list (one int object per step for both)
            and its distinctness, instead of keeping the points' own step objects.
        :param points: the points, in order.
        """
        steps = list(map(_first, points))
        values = list(map(_second, points))
        if like is not None and like.steps == steps:
            return cls(like.steps.copy(), values, like.distinct)
        return cls(steps, values, len(set(steps)) == len(steps))

    def points(self) -> list[Point]:
        """The points as ``(step, value)`` tuples."""
        return list(zip(self.steps, self.values))

    def __len__(self) -> int:
        return len(self.steps)

    def __repr__(self) -> str:
        return f"Columns({len(self)} points)"


_first = itemgetter(0)
_second = itemgetter(1)


class Record:
    """The merged content of a record: every metric's points, in first-seen metric order.

    :param metrics: metric name -> its points: a list of ``(step, value)`` points, or
        :class:`Columns`.  A step is an int >= 0 or ``None``, a value is whatever the record held
        (numbers, non-finite floats, or non-numeric values that step selection drops); a number
        may come back as a float where the record wrote an integer.
    :param sources: the files read, in read order.
    :param skipped: the entries of a record directory that were not read, as ``(path, reason)``.
    :param invalid_steps: metric name -> its points whose step was not an int >= 0, as
        ``(step as written, value, file, line)``; they are among the metric's points with step
        ``None``, and step selection names them in the reasons they cause.
    :param dropped: metric name -> its points whose value is not a number (``null``, a boolean, a
        string other than the markers), as ``(step, value, file, line)``: the first
        :data:`MAX_DROPPED_NOTES` of each metric; selection drops them and reports them.  A point
        a later line replaced (same metric, same step, same file) is not among them.
    :param dropped_count: metric name -> how many such points it has in all.
    :param warnings: what reading accepted as the reference gate does but a user should hear
        about, each naming file and line (a line whose ``metric`` is not a string, which no
        declaration can gate; a metric named ``""``): the first :data:`MAX_READ_WARNINGS`.
    :param warning_count: how many warnings there were in all.
    :param last_lines: metric name -> the points of its last line, for a metric written on
        several lines of one file (a resumed trainer): ``steps: "last"`` gates the last point of
        that line, as the reference gate does, even when the line restarted at a lower step.
    """

    __slots__ = ("_series", "sources", "skipped", "invalid_steps", "dropped", "dropped_count", "warnings",
                 "warning_count", "last_lines")

    def __init__(
        self,
        metrics: dict[str, list[Point] | Columns] | None = None,
        sources: list[str] | None = None,
        skipped: list[tuple[str, str]] | None = None,
        invalid_steps: dict[str, list[InvalidStep]] | None = None,
        *,
        dropped: dict[str, list[DroppedPoint]] | None = None,
        dropped_count: dict[str, int] | None = None,
        warnings: list[str] | None = None,
        warning_count: int | None = None,
        last_lines: dict[str, list[Point] | Columns] | None = None,
    ) -> None:
        self._series: dict[str, list[Point] | Columns] = metrics if metrics is not None else {}
        self.sources: list[str] = sources if sources is not None else []
        self.skipped: list[tuple[str, str]] = skipped if skipped is not None else []
        self.invalid_steps: dict[str, list[InvalidStep]] = invalid_steps if invalid_steps is not None else {}
        self.dropped: dict[str, list[DroppedPoint]] = dropped if dropped is not None else {}
        self.dropped_count: dict[str, int] = (
            dropped_count if dropped_count is not None else {m: len(n) for m, n in self.dropped.items()}
        )
        self.warnings: list[str] = warnings if warnings is not None else []
        self.warning_count: int = warning_count if warning_count is not None else len(self.warnings)
        self.last_lines: dict[str, list[Point] | Columns] = last_lines if last_lines is not None else {}

    def last_line(self, metric: str) -> list[Point] | None:
        """The points of the metric's last line when it was written on several lines of one file, else ``None``.

        :param metric: a metric of the record.
        """
        part = self.last_lines.get(metric)
        if part is None:
            return None
        return part.points() if isinstance(part, Columns) else part

    @property
    def metrics(self) -> dict[str, list[Point]]:
        """Metric name -> ``(step, value)`` points, in first-seen metric order (a new dict on each call)."""
        return {metric: self[metric] for metric in self._series}

    def columns(self, metric: str) -> Columns | None:
        """The metric's points as :class:`Columns` when they were read as such, else ``None``.

        :param metric: a metric of the record.
        """
        series = self._series.get(metric)
        return series if type(series) is Columns else None

    def __contains__(self, metric: object) -> bool:
        return metric in self._series

    def __getitem__(self, metric: str) -> list[Point]:
        series = self._series[metric]
        return series.points() if isinstance(series, Columns) else series

    def __len__(self) -> int:
        return len(self._series)

    def __iter__(self) -> Iterator[str]:
        return iter(self._series)

    def point_count(self) -> int:
        """Return the number of points over all metrics."""
        return sum(map(len, self._series.values()))

    def __repr__(self) -> str:
        return f"Record({len(self)} metrics, {self.point_count()} points, {len(self.sources)} file(s))"
