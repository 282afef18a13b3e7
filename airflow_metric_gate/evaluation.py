"""Comparing a value with the history of its coordinate (SPEC section 6).

The band and the reference are :mod:`airflow_metric_gate.bands` (re-exported here).  Every FAIL
says which side it left and whether the relative term or the absolute floor set that side.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass

from airflow_metric_gate.bands import (
    Band,
    band_limits,
    compute_band,
    constraint_params,
    median_and_mad,
    overflow_message,
    reference,
)
from airflow_metric_gate.enums import AGGREGATES, ERROR, FAIL, INACTIVE, PASS, STATUSES

__all__ = [
    "AGGREGATES",
    "DEFAULT_HISTORY_LIMIT",
    "DEFAULT_MIN_HISTORY",
    "ERROR",
    "FAIL",
    "INACTIVE",
    "NIGHT_BOUND",
    "PASS",
    "STATUSES",
    "Band",
    "Judged",
    "Result",
    "band_limits",
    "compute_band",
    "constraint_params",
    "describe",
    "error_result",
    "evaluate_value",
    "is_trusted",
    "judge",
    "judge_night",
    "median_and_mad",
    "night_result",
    "reference",
    "step_z",
]

DEFAULT_HISTORY_LIMIT = 20
DEFAULT_MIN_HISTORY = 1

#: What :func:`judge` decides for one coordinate: ``(status, ref, error, mad)``; ``ref`` is ``None``
#: unless the status is PASS or FAIL, ``error`` says why an ERROR is one, ``mad`` is the baseline
#: values' median absolute deviation when the ``mad`` band judged (``ref`` is then their median).
Judged = tuple[str, "float | None", "str | None", "float | None"]

#: A declaration with ``band: mad`` judges a coordinate by its MAD band only from this many baseline
#: values on; with fewer (a spread measured on a handful of nights is itself noise), or a MAD of 0,
#: the constraint's band judges it.
MAD_MIN_VALUES = 10

#: The ``bound`` of a declaration's whole-night FAIL (the opt-in ``night_mean_k``, :func:`judge_night`).
NIGHT_BOUND = "night_mean"


@dataclass
class Result:
    """The outcome for one coordinate; its fields are the verdict's result fields (SPEC 10)."""

    metric_key: str
    steps_key: str
    constraint_key: str
    step: int | None
    at_step: int | None
    status: str
    current: float | None = None
    ref: float | None = None
    n: int = 0
    lo: float | None = None
    hi: float | None = None
    side: str | None = None
    bound: str | None = None
    reason: str = ""

    def to_dict(self) -> dict:
        """Return the result as a strict-JSON dict.

        A number beyond the float range (a band edge of a huge reference) has no JSON spelling:
        it becomes ``null`` and the reason says which field and which way it overflowed.
        """
        out = asdict(self)
        notes = []
        for name in ("current", "ref", "lo", "hi"):
            x = out[name]
            if x is not None and not math.isfinite(x):
                out[name] = None
                notes.append(f"{name} is beyond the float range ({x}), shown as null")
        if notes:
            out["reason"] = "; ".join([out["reason"], *notes] if out["reason"] else notes)
        return out


def judge(current: float, values: Sequence[float], params: tuple[float, float, float, float], min_history: int,
          aggregate: str = "mean", mad_k: float | None = None) -> Judged:
    """Decide one coordinate's status (SPEC 6): the one place PASS, FAIL and INACTIVE are decided.

    Fewer than ``min_history`` baseline values (or none) is INACTIVE (a cold start); a baseline
    whose sum leaves the float range is ERROR; otherwise the value is PASS inside the band
    (:func:`band_limits`, both ends inclusive) and FAIL outside it.  Builds no result object, so
    judging a run's 100,000 coordinates stays cheap; :func:`describe` explains what was decided.

    With ``mad_k`` (a declaration's opt-in ``band: mad``) and at least :data:`MAD_MIN_VALUES`
    baseline values whose MAD is not 0, the band is ``median -+ mad_k x MAD`` instead (both ends
    inclusive; the constraint and ``aggregate`` are then not used).

    :param current: the value of the run being gated.
    :param values: the coordinate's baseline values.
    :param params: the constraint as a tuple (see :func:`constraint_params`).
    :param min_history: fewer baseline values than this makes the result INACTIVE.
    :param aggregate: ``"mean"`` or ``"median"`` (see :func:`reference`).
    :param mad_k: the half-width of the ``mad`` band in MADs; ``None``: the constraint's band.
    :return: ``(status, ref, error, mad)``.
    """
    n = len(values)
    if n == 0 or n < min_history:
        return INACTIVE, None, None, None
    if mad_k is not None and n >= MAD_MIN_VALUES:
        median, mad = median_and_mad(values)
        if mad > 0:
            half = mad_k * mad
            return (PASS if median - half <= current <= median + half else FAIL), median, None, mad
    try:
        # the mean as reference() computes it, without the call (the common case, once per coordinate)
        ref = math.fsum(values) / n if aggregate == "mean" else reference(values, aggregate)
    except OverflowError:
        return ERROR, None, overflow_message(n), None
    lo, hi = band_limits(ref, params)
    return (PASS if lo <= current <= hi else FAIL), ref, None, None


def step_z(current: float, values: Sequence[float], judged: Judged) -> float | None:
    """Return one judged coordinate's robust z, ``(current - median) / MAD`` of its baseline values.

    What the opt-in whole-night rule (``night_mean_k``, :func:`judge_night`) adds up over a
    declaration's steps.  ``None`` when the coordinate was not judged PASS or FAIL (a cold start, an
    ERROR), when it has fewer than :data:`MAD_MIN_VALUES` baseline values, or when their MAD is 0:
    the same conditions as the ``mad`` band.  When the ``mad`` band judged it, its median and MAD are
    reused.

    :param current: the value of the run being gated.
    :param values: the coordinate's baseline values.
    :param judged: what :func:`judge` returned for them.
    """
    status, ref, _, mad = judged
    if status not in (PASS, FAIL) or len(values) < MAD_MIN_VALUES:
        return None
    if mad is None:
        ref, mad = median_and_mad(values)
    return (current - ref) / mad if mad > 0 else None  # type: ignore[operator]  # a PASS or FAIL has a ref


def judge_night(zs: Sequence[float], night_k: float) -> tuple[str, float] | None:
    """Decide a declaration's whole night (the opt-in ``night_mean_k``): the one place it is decided.

    The statistic is the sum of the steps' robust z (:func:`step_z`) divided by the square root of
    their number (the mean z times ``sqrt(n)``): for independent steps it has the spread of one
    step's z whatever ``n``, while a level shift of ``d`` MADs on ``m`` of the ``n`` steps moves it
    by ``d x m / sqrt(n)``.  FAIL when it is beyond ``night_k`` on either side (inclusive band),
    else PASS.

    :param zs: the robust z of the declaration's judged steps in this run.
    :param night_k: the threshold (a declaration's ``night_mean_k``).
    :return: ``(status, statistic)``, or ``None`` when no step has a z (nothing to judge).
    """
    if not zs:
        return None
    statistic = math.fsum(zs) / math.sqrt(len(zs))
    return (PASS if -night_k <= statistic <= night_k else FAIL), statistic


def night_result(metric_key: str, steps_key: str, constraint_key: str, zs: Sequence[float],
                 judged: tuple[str, float], night_k: float) -> Result:
    """Return the declaration-level result of :func:`judge_night`, explaining it.

    ``step`` and ``at_step`` are ``None`` (the whole night), ``current`` is the statistic, ``ref``
    0, ``lo`` and ``hi`` are ``-night_k`` and ``night_k``, ``n`` the number of steps added up, and a
    FAIL's ``bound`` is :data:`NIGHT_BOUND`.

    :param metric_key: the declaration's metric.
    :param steps_key: the declaration's steps key.
    :param constraint_key: the declaration's constraint key.
    :param zs: the steps' robust z that were added up.
    :param judged: what :func:`judge_night` returned for them.
    :param night_k: the declaration's ``night_mean_k``.
    """
    status, statistic = judged
    n = len(zs)
    result = Result(metric_key, steps_key, constraint_key, None, None, status, current=statistic, ref=0.0, n=n,
                    lo=-night_k, hi=night_k)
    what = (f"whole night: the robust z ((value - median) / MAD of the step's baseline) of {n} step(s), "
            f"mean {_fmt(statistic / math.sqrt(n))}, x sqrt({n}) = {_fmt(statistic)}")
    if status == PASS:
        result.reason = f"{what}, within -+{_fmt(night_k)} (night_mean_k)"
        return result
    above = statistic > night_k
    result.side, result.bound = ("above" if above else "below"), NIGHT_BOUND
    result.reason = (f"{what} is {result.side} {'hi' if above else 'lo'} {_fmt(night_k if above else -night_k)} "
                     f"(night_mean_k); off by {_fmt(abs(statistic) - night_k)}")
    return result


def _fmt(x: float) -> str:
    return f"{x:.6g}"


def describe(
    metric_key: str,
    steps_key: str,
    constraint_key: str,
    step: int | None,
    at_step: int | None,
    current: float,
    n: int,
    judged: Judged,
    constraint: Mapping[str, float],
    min_history: int = DEFAULT_MIN_HISTORY,
    aggregate: str = "mean",
    mad_k: float | None = None,
) -> Result:
    """Return the result of a coordinate :func:`judge` decided, explaining the decision.

    Decides nothing: a FAIL says which side it left and which term set that side (SPEC 6).

    :param metric_key: the coordinate's metric.
    :param steps_key: the coordinate's steps key.
    :param constraint_key: the coordinate's constraint key.
    :param step: the stored step.
    :param at_step: the real step, for reporting.
    :param current: the value of the run being gated.
    :param n: how many baseline values were judged against.
    :param judged: what :func:`judge` returned for them.
    :param constraint: the band parameters.
    :param min_history: the cold-start threshold, for the reason.
    :param aggregate: the reference's aggregate, for the reason.
    :param mad_k: the declaration's ``mad_k`` when it has ``band: mad`` (what :func:`judge` was given).
    """
    status, ref, error, mad = judged
    result = Result(metric_key, steps_key, constraint_key, step, at_step, status, current=current, n=n)
    if status == INACTIVE:
        result.reason = f"cold start: {n} baseline value(s), {max(min_history, 1)} needed"
        return result
    if status == ERROR or ref is None:
        result.reason = error or ""
        return result
    if mad is not None and mad_k is not None:
        return _describe_mad(result, ref, mad, mad_k)
    band = compute_band(ref, constraint)
    result.ref, result.lo, result.hi = ref, band.lo, band.hi
    if status == PASS:
        result.reason = "within band"
        return result
    if current > band.hi:
        result.side, result.bound = "above", band.hi_bound
        rel, floor, limit, sign = constraint.get("rel_up", 0.0), constraint.get("abs_floor_up", 0.0), band.hi, "+"
    else:
        result.side, result.bound = "below", band.lo_bound
        rel, floor = constraint.get("rel_down", 0.0), constraint.get("abs_floor_down", 0.0)
        limit, sign = band.lo, "-"
    term = f"rel {_fmt(rel)} x |ref| = {_fmt(rel * abs(ref))}" if result.bound == "rel" else f"abs_floor {_fmt(floor)}"
    result.reason = (
        f"{_fmt(current)} is {result.side} {'hi' if sign == '+' else 'lo'} {_fmt(limit)} "
        f"(ref {_fmt(ref)} {sign} {term}; {aggregate} of n={n}); "
        f"off by {_fmt(abs(current - limit))}"
    )
    if mad_k is not None:  # band: mad, but too few values or no spread to measure it on
        why = f"{n} baseline value(s), {MAD_MIN_VALUES} needed" if n < MAD_MIN_VALUES else "the MAD is 0"
        result.reason += f"; constraint band, not the mad band: {why}"
    return result


def _describe_mad(result: Result, ref: float, mad: float, mad_k: float) -> Result:
    """Fill in a result the ``mad`` band judged: ``ref`` is the median, the band ``ref -+ mad_k x MAD``."""
    half = mad_k * mad
    current = result.current
    result.ref, result.lo, result.hi = ref, ref - half, ref + half
    if result.status == PASS:
        result.reason = "within band"
        return result
    above = current > result.hi  # type: ignore[operator]  # a FAIL has a current value
    result.side, result.bound = ("above" if above else "below"), "mad"
    limit, sign = (result.hi, "+") if above else (result.lo, "-")
    result.reason = (
        f"{_fmt(current)} is {result.side} {'hi' if above else 'lo'} {_fmt(limit)} "  # type: ignore[arg-type]  # a FAIL has one
        f"(mad band: ref {_fmt(ref)} {sign} {_fmt(mad_k)} x MAD {_fmt(mad)} = {_fmt(half)}; median of n={result.n}); "
        f"off by {_fmt(abs(current - limit))}"  # type: ignore[operator]  # a FAIL has one
    )
    return result


def evaluate_value(
    *,
    metric_key: str,
    steps_key: str,
    constraint_key: str,
    step: int,
    at_step: int | None,
    current: float,
    history: Sequence[float] = (),
    constraint: Mapping[str, float],
    min_history: int = DEFAULT_MIN_HISTORY,
    aggregate: str = "mean",
    mad_k: float | None = None,
) -> Result:
    """Judge one current value against its coordinate's baseline values and explain the result.

    :func:`judge` then :func:`describe`.

    :param metric_key: the coordinate's metric.
    :param steps_key: the coordinate's steps key.
    :param constraint_key: the coordinate's constraint key.
    :param step: the stored step.
    :param at_step: the real step, for reporting.
    :param current: the value of the run being gated.
    :param history: the baseline values of the same coordinate.
    :param constraint: the band parameters.
    :param min_history: fewer baseline values than this makes the result INACTIVE.
    :param aggregate: ``"mean"`` or ``"median"``.
    :param mad_k: the ``mad`` band's half-width in MADs (a declaration's ``band: mad``); ``None``: the
        constraint's band.
    """
    judged = judge(current, history, constraint_params(constraint), min_history, aggregate, mad_k)
    return describe(metric_key, steps_key, constraint_key, step, at_step, current, len(history), judged,
                    constraint, min_history, aggregate, mad_k)


def error_result(metric_key: str, steps_key: str, constraint_key: str, message: str) -> Result:
    """Return the ERROR result of a declaration that selected nothing.

    :param metric_key: the declaration's metric.
    :param steps_key: the declaration's steps key.
    :param constraint_key: the declaration's constraint key.
    :param message: why selection failed.
    """
    return Result(metric_key, steps_key, constraint_key, None, None, ERROR, reason=message)


def is_trusted(counts: Mapping[str, int]) -> bool:
    """Decide a run's trust (SPEC 6): trusted iff no result is FAIL or ERROR (no results: trusted).

    :param counts: how many results of each status the run has (a missing status counts 0).
    """
    return not (counts.get(FAIL) or counts.get(ERROR))
