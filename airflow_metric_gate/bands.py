"""The reference policy's band around a baseline reference, and the reference itself (SPEC 6).

The band scales from the baseline reference only::

    hi = ref + max(rel_up   * |ref|, abs_floor_up)
    lo = ref - max(rel_down * |ref|, abs_floor_down)

Both ends are inclusive.  Judging a value against it is :mod:`airflow_metric_gate.evaluation`.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from airflow_metric_gate.enums import Aggregate


@dataclass(frozen=True)
class Band:
    """An inclusive band around a reference, with the term that set each side."""

    lo: float
    hi: float
    lo_bound: str
    hi_bound: str


def band_limits(ref: float, params: tuple[float, float, float, float]) -> tuple[float, float]:
    """Return ``(lo, hi)`` for a reference and ``(rel_up, abs_floor_up, rel_down, abs_floor_down)``.

    The hot path of evaluation: no objects, no look-ups.

    :param ref: the baseline reference.
    :param params: the constraint as a tuple (see :func:`constraint_params`).
    """
    rel_up, floor_up, rel_down, floor_down = params
    size = abs(ref)
    down, up = rel_down * size, rel_up * size
    # max(term, floor), spelled out (a builtin call per side is most of this function's cost)
    return ref - (floor_down if floor_down > down else down), ref + (floor_up if floor_up > up else up)


def constraint_params(constraint: Mapping[str, float]) -> tuple[float, float, float, float]:
    """Return a constraint as ``(rel_up, abs_floor_up, rel_down, abs_floor_down)``, missing keys 0.0.

    :param constraint: the band parameters.
    """
    return (
        constraint.get("rel_up", 0.0),
        constraint.get("abs_floor_up", 0.0),
        constraint.get("rel_down", 0.0),
        constraint.get("abs_floor_down", 0.0),
    )


def median_and_mad(values: Sequence[float]) -> tuple[float, float]:
    """Return the median of some baseline values and their median absolute deviation (MAD).

    ``MAD = median(|v - median|)``.

    :param values: the baseline values (non-empty, finite).
    """
    median = reference(values, "median")
    return median, reference([abs(v - median) for v in values], "median")


def compute_band(ref: float, constraint: Mapping[str, float]) -> Band:
    """Return the band around ``ref`` for a constraint (missing keys count as 0.0).

    A side is set by the relative term when it is at least the floor, else by the floor.

    :param ref: the baseline reference.
    :param constraint: ``rel_up``, ``abs_floor_up``, ``rel_down``, ``abs_floor_down``.
    """
    params = constraint_params(constraint)
    lo, hi = band_limits(ref, params)
    up_rel, up_floor = params[0] * abs(ref), params[1]
    down_rel, down_floor = params[2] * abs(ref), params[3]
    return Band(
        lo=lo,
        hi=hi,
        lo_bound="rel" if down_rel >= down_floor else "abs_floor",
        hi_bound="rel" if up_rel >= up_floor else "abs_floor",
    )


def reference(values: Sequence[float], aggregate: str = "mean") -> float:
    """Return the baseline reference of some history values.

    The mean uses an exactly rounded sum (``math.fsum``), so the answer does not depend on the
    order the store returned the values in, nor on the store.

    :param values: the baseline values (non-empty, finite).
    :param aggregate: ``"mean"`` (default) or ``"median"``.
    :raises OverflowError: the sum of the values is beyond the float range (the message says so).
    """
    if aggregate == "mean":
        try:
            return math.fsum(values) / len(values)
        except OverflowError:
            raise OverflowError(overflow_message(len(values))) from None
    if aggregate == "median":
        ordered = sorted(values)
        mid = len(ordered) // 2
        if ordered[mid] == 0.0 or (len(ordered) % 2 == 0 and ordered[mid - 1] == 0.0):
            # zeros in the middle: -0.0 before 0.0, so the median's sign does not follow the values' order
            ordered.sort(key=_signed_zero_order)
        if len(ordered) % 2:
            return float(ordered[mid])
        lo, hi = ordered[mid - 1], ordered[mid]
        middle = (lo + hi) / 2
        return middle if math.isfinite(middle) else lo / 2 + hi / 2
    raise ValueError(Aggregate.problem(aggregate, "aggregate"))


def _signed_zero_order(value: float) -> tuple[float, float]:
    return value, math.copysign(1.0, value)


def overflow_message(n: int) -> str:
    """Say that the sum of ``n`` baseline values left the float range.

    :param n: how many baseline values were added up.
    """
    return f"the sum of the {n} baseline value(s) is beyond the float range (overflow); no mean can be computed"
