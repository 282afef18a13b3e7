"""The calibrated policy's tests beside the night test: blow-ups, the prior band, sustained shifts, the
within-night shape and slow drift, and the wording of what they report.
"""

from __future__ import annotations

import math
from bisect import bisect_left
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from airflow_metric_gate.decision.history import Candidate, Decision
from airflow_metric_gate.decision.parameters import (
    _TINY,
    BLOWUP_RATIO,
    CALIBRATION_MIN,
    DRIFT_FALSE_ALARM,
    DRIFT_MIN,
    DRIFT_RAMP_NIGHTS,
    HEAVY_TAIL_DF,
    PRIOR_SHARE,
    SHAPE_FALSE_ALARM,
    SHAPE_PART_MIN,
    SHAPE_SPLITS,
    SHIFT_ADOPT,
    SUSTAINED_FALSE_ALARM,
    SUSTAINED_NIGHTS,
)
from airflow_metric_gate.decision.stats import mean_and_sd, t_quantile, trimmed_mean, trimmed_means
from airflow_metric_gate.enums import FAIL, INACTIVE, PASS
from airflow_metric_gate.evaluation import Result, band_limits, constraint_params
from airflow_metric_gate.selection import LAST_STEP


def _fmt(x: float) -> str:
    return f"{x:.4g}"


def _pct(x: float) -> str:
    return f"{x * 100:+.1f} %"


def _steps_text(steps: Sequence[int | None]) -> str:
    # a declaration of the last step keys it LAST_STEP: named so, the step it was is in its result
    shown = ["last" if s == LAST_STEP else str(s) for s in steps if s is not None]
    if not shown:
        return ""
    if len(shown) <= 6:
        return "step(s) " + ", ".join(shown)
    return f"{len(shown)} steps ({shown[0]} to {shown[-1]})"


def _sustained(direction: str, statistic: float, past: Sequence[float], history: Sequence[Candidate], *,
               few_steps: bool) -> dict | None:
    """The sustained-shift test: tonight and the nights just before it, together off the other nights.

    For ``k`` of :data:`SUSTAINED_NIGHTS`, the mean statistic of the last ``k`` nights (tonight and
    the ``k - 1`` trusted nights just before it) is compared with the other trusted nights':
    ``t = (mean_k - mean_rest) / (sd_rest x sqrt(1/k + 1/n_rest))``, Student's ``t`` with
    ``n_rest - 1`` degrees of freedom on clean nights, each ``k`` at :data:`SUSTAINED_FALSE_ALARM`.
    A shift too small for one night's band is caught on its second or third night, and the nights
    it already moved do not hide it (they are left out of the comparison).

    :param statistic: tonight's night statistic.
    :param past: each trusted night's statistic (against the others), in ``history`` order.
    :param history: the trusted nights, oldest first.
    """
    one_sided = direction != "both"
    for k in SUSTAINED_NIGHTS:
        rest = past[: len(past) - (k - 1)]
        if len(rest) < CALIBRATION_MIN:
            continue
        recent = [*past[len(past) - (k - 1):], statistic]
        r_mean, r_sd = mean_and_sd(rest)
        if r_sd <= 0:
            continue
        sides = {_worse_side(direction, v - r_mean, 0.0) for v in recent}
        if len(sides) != 1 or None in sides:
            continue
        t = (math.fsum(recent) / k - r_mean) / (r_sd * math.sqrt(1.0 / k + 1.0 / len(rest)))
        df = min(len(rest) - 1, HEAVY_TAIL_DF) if few_steps else len(rest) - 1
        threshold = t_quantile(1.0 - (SUSTAINED_FALSE_ALARM if one_sided else SUSTAINED_FALSE_ALARM / 2.0), df)
        side = _worse_side(direction, t, threshold)
        if side is not None:
            first = history[len(history) - (k - 1)]
            return {"nights": k, "statistic": t, "threshold": threshold, "side": side,
                    "since": first.logical_date, "since_run_id": first.run_id}
    return None


def _is_blowup(value: float, ref: float, column: Sequence[float]) -> bool:
    """Whether a value is far outside anything its history allows: :data:`BLOWUP_RATIO` times beyond its range.

    For positive values: at least ``BLOWUP_RATIO`` times the largest trusted value, or at most the
    smallest one divided by it.  Otherwise: farther from the median than ``BLOWUP_RATIO`` times
    the larger of ``|median|`` and the farthest trusted value.
    """
    low, high = column[0], column[-1]  # sorted
    if value > 0 and low > 0:
        return value >= BLOWUP_RATIO * high or value <= low / BLOWUP_RATIO
    reach = max(abs(ref), abs(high - ref), abs(ref - low))
    return reach > _TINY and abs(value - ref) >= BLOWUP_RATIO * reach


def _shift(previous: Mapping[str, Any], failed: Sequence[Result], tonight, refs, columns, run_id: str,
           logical_date: str) -> dict[str, Any]:
    """The level shift a blow-up or a prior-band failure reports, new tonight or continuing the previous night's.

    A blow-up or a failure of the prior band that goes on night after night is a level shift: it
    pages on its first night, continues without paging, and is adopted after :data:`SHIFT_ADOPT`
    nights (:func:`~airflow_metric_gate.decision.history.choose_history`), so it never pages forever.
    Either test continues a shift of the other on the same side: a new level near the blow-up ratio
    may be a blow-up one night and only beyond the prior band the next.

    :param previous: what the latest untrusted night since the last trusted one stored, if any.
    :param failed: tonight's step results; the side most of the FAILs are on is the shift's.
    :return: the verdict's ``shift`` report (``since``, ``since_run_id``, ``nights``, ``change``,
        ``continues``, ``adopt_after``) with ``side``.
    """
    sides = [r.side for r in failed if r.status == FAIL]
    side = max(("above", "below"), key=sides.count)
    continues = bool((previous.get("blowup") or previous.get("prior")) and previous.get("o") in ("fail", "shift")
                     and previous.get("side") == side and previous.get("since"))
    since_run, since_date, nights = run_id, logical_date, 1
    if continues:
        since_run, since_date = str(previous["since"]), str(previous.get("since_date", logical_date))
        nights = int(previous.get("nights", 1)) + 1
    level = _level([tonight[i][2] for i, c in enumerate(columns) if c], [r for r, c in zip(refs, columns) if c])
    return {"since": since_date, "since_run_id": since_run, "nights": nights, "change": level,
            "continues": continues, "adopt_after": SHIFT_ADOPT, "side": side}


def _stored_shift(shift: Mapping[str, Any], flag: str, cause: str) -> tuple[str, dict[str, Any]]:
    """The outcome (``fail`` on a shift's first night, ``shift`` after) and what the store keeps of it.

    A prior-band failure keeps its ``level`` (later nights' drift test reads the levels of the
    untrusted nights before them); a blow-up's level, far beyond anything, is not kept.
    """
    outcome = "shift" if shift["continues"] else "fail"
    stored = {"o": outcome, flag: True, "side": shift["side"], "since": shift["since_run_id"],
              "since_date": shift["since"], "nights": shift["nights"], "cause": cause}
    if flag == "prior":
        stored["level"] = shift["change"]
    return outcome, stored


def _continues_text(continues: bool, nights: int) -> str:
    return (f" (night {nights}, reported on its first night; adopted as the baseline after {SHIFT_ADOPT} "
            "nights unless accepted or fixed first)" if continues else "")


def _blowup(key: tuple[str, str, str], tonight, refs, columns, blown, report, n, *, previous: Mapping[str, Any],
            run_id: str, logical_date: str, nights: str = "trusted night(s)") -> Decision:
    """Tonight blew up: most of its steps with a history are :data:`BLOWUP_RATIO` times beyond it.

    ``nights`` names what the ``n`` nights judged against are (trusted ones, or, with none yet,
    the level's own untrusted nights so far: :func:`~airflow_metric_gate.decision.history.cold_pool`).
    """
    blown_set = set(blown)
    out = []
    for (step, at, value), ref, column in zip(tonight, refs, columns):
        if step in blown_set:
            side = "above" if value > ref else "below"
            if value > 0 and column[0] > 0:
                lo, hi = column[0] / BLOWUP_RATIO, column[-1] * BLOWUP_RATIO
            else:
                reach = BLOWUP_RATIO * max(abs(ref), abs(column[-1] - ref), abs(ref - column[0]))
                lo, hi = ref - reach, ref + reach
            out.append(Result(*key, step, at, FAIL, current=value, ref=ref, n=len(column), lo=lo, hi=hi, side=side,
                              bound="blowup",
                              reason=f"{_fmt(value)} is {BLOWUP_RATIO:g}x or more beyond anything its "
                                     f"{len(column)} {nights} had ([{_fmt(column[0])}, {_fmt(column[-1])}]): "
                                     "a blow-up"))
        else:
            out.append(Result(*key, step, at, PASS, current=value, ref=None if not column else ref, n=len(column),
                              reason="not blown up"))
    shift = _shift(previous, out, tonight, refs, columns, run_id, logical_date)
    text = (f"blow-up: {_steps_text(sorted(blown_set))} ({len(blown_set)} of {len(tonight)}) at least "
            f"{BLOWUP_RATIO:g}x beyond anything their {n} {nights} had; judged with any history"
            + _continues_text(shift["continues"], shift["nights"]))
    out.append(Result(*key, None, None, FAIL, n=n, side=shift["side"], bound="blowup", reason=text))
    report["blowup"] = {"steps": sorted(blown_set)[:50], "count": len(blown_set), "since": shift["since"],
                        "since_run_id": shift["since_run_id"], "nights": shift["nights"],
                        "continues": shift["continues"]}
    # a level shift like any other, so that on-call is offered the accept (log, UI) if the new level is right
    report["shift"] = {k: v for k, v in shift.items() if k != "side"}
    outcome, stored = _stored_shift(shift, "blowup", f"{key[0]}: blow-up")
    return Decision(outcome, out, stored, report)


def _prior_band(key: tuple[str, str, str], gate, direction, tonight, refs, columns, report, n, need, *,
                previous: Mapping[str, Any], run_id: str, logical_date: str) -> Decision | None:
    """Before the night test is calibrated: a quarter of the steps or more beyond the constraint's band.

    The declaration's constraint (its own, or the defaults table's) is the prior: with fewer than
    ``need`` trusted nights the night fails when at least :data:`PRIOR_SHARE` of its steps that
    have a median leave that band on the side that is a regression.  A few noisy steps fail nothing.
    Such a night is a level shift like the night test's: it pages on its first night, the nights
    after it that leave the band on the same side continue it without paging, and after
    :data:`SHIFT_ADOPT` of them the shift is adopted as the history (so a legitimate new level right
    after a cold start or an accept is never a lock-out).

    :param previous: what the latest untrusted night since the last trusted one stored, if any.
    :param run_id: tonight's store run id (a shift starting tonight is named by it).
    :param logical_date: tonight's logical date (ISO 8601).
    """
    params = constraint_params(gate.get("constraint") or {})
    up, down = params[0] > 0 or params[1] > 0, params[2] > 0 or params[3] > 0
    if not ((direction in ("up", "both") and up) or (direction in ("down", "both") and down)):
        return None  # a band of no width on the regression side says nothing yet
    out, outside, judged = [], [], 0
    for (step, at, value), ref, column in zip(tonight, refs, columns):
        if not column:
            out.append(Result(*key, step, at, INACTIVE, current=value, n=0, reason="no trusted value of this step"))
            continue
        judged += 1
        lo, hi = band_limits(ref, params)
        side = "above" if value > hi else "below" if value < lo else None
        if side is not None and _worse_side(direction, 1.0 if side == "above" else -1.0, 0.0) == side:
            outside.append(step)
            out.append(Result(*key, step, at, FAIL, current=value, ref=ref, n=len(column), lo=lo, hi=hi, side=side,
                              bound="constraint",
                              reason=f"{_fmt(value)} is {side} the constraint's band [{_fmt(lo)}, {_fmt(hi)}] around "
                                     f"its median {_fmt(ref)} of {len(column)} trusted night(s)"))
        else:
            out.append(Result(*key, step, at, INACTIVE, current=value, n=len(column),
                              reason=f"calibrating: {n} trusted night(s), {need} needed for the night test; "
                                     "within the constraint's band"))
    if not judged or len(outside) < PRIOR_SHARE * judged:
        return None
    shift = _shift(previous, out, tonight, refs, columns, run_id, logical_date)
    side = shift["side"]
    text = (f"calibrating ({n} of {need} trusted nights): {_steps_text(outside)} ({len(outside)} of {judged}) "
            f"{side} the constraint's band on the regression side; level shift since {shift['since']}: "
            f"{_pct(shift['change'])}" + _continues_text(shift["continues"], shift["nights"]))
    out.append(Result(*key, None, None, FAIL, n=n, side=side, bound="constraint", reason=text))
    report["prior"] = {"steps": outside[:50], "count": len(outside)}
    report["shift"] = {k: v for k, v in shift.items() if k != "side"}
    outcome, stored = _stored_shift(shift, "prior", f"{key[0]}: {len(outside)} step(s) {side} the constraint's band")
    return Decision(outcome, out, stored, report)


def _level(values: Sequence[float], refs: Sequence[float]) -> float:
    """The night's level relative to the baseline: the trimmed mean of ``value / ref - 1`` over its steps."""
    rel = [v / r - 1.0 if abs(r) > _TINY else 0.0 for v, r in zip(values, refs)]
    return trimmed_mean(rel) if rel else 0.0


def _worse_side(direction: str, z: float, q: float) -> str | None:
    if direction in ("up", "both") and z > q:
        return "above"
    if direction in ("down", "both") and z < -q:
        return "below"
    return None


def _better_side(direction: str, z: float, q: float) -> str | None:
    if direction == "up" and z < -q:
        return "below"
    if direction == "down" and z > q:
        return "above"
    return None


def _shape(direction: str, r_tonight: Sequence[float], per_night_r: Sequence[Sequence[float]],
           per_night_pos: Sequence[Sequence[int]], complete: np.ndarray | None = None) -> dict | None:
    """The within-night test: the later steps of the night against its earlier steps.

    For each split point of :data:`SHAPE_SPLITS`, the contrast ``C`` is the trimmed mean of the
    later steps' deviations minus the earlier steps'.  Whatever moves every step of a night
    together (the per-night factor, a legitimate level change) cancels in ``C``; a night that
    got worse part-way (a plateau, a collapse from some step on) does not.  Tonight's ``C`` is
    compared with the same contrast of every trusted night (Student's ``t`` prediction bound, all
    split points together at :data:`SHAPE_FALSE_ALARM`).

    :param r_tonight: tonight's deviations of the judged steps, in step order.
    :param per_night_r: each trusted night's deviations (against the others).
    :param per_night_pos: the positions (in ``r_tonight``) of those deviations, increasing.
    :param complete: the same deviations as one array when every night has every judged step (the
        contrasts are then worked out for all nights at once, the same floats), else ``None``.
    """
    count = len(r_tonight)
    cuts = sorted({round(f * count) for f in SHAPE_SPLITS} & set(range(SHAPE_PART_MIN, count - SHAPE_PART_MIN + 1)))
    if not cuts:
        return None
    one_sided = direction != "both"
    alpha = SHAPE_FALSE_ALARM / len(cuts) / (1.0 if one_sided else 2.0)
    best: dict | None = None
    for cut in cuts:
        contrast = trimmed_mean(r_tonight[cut:]) - trimmed_mean(r_tonight[:cut])
        past = []
        if complete is not None:  # every night has every step: k == cut, and both parts are long enough
            past = [a - b for a, b in zip(trimmed_means(complete[:, cut:]), trimmed_means(complete[:, :cut]))]
        else:
            for rs, ps in zip(per_night_r, per_night_pos):
                k = bisect_left(ps, cut)
                if k >= 3 and len(rs) - k >= 3:
                    past.append(trimmed_mean(rs[k:]) - trimmed_mean(rs[:k]))
        if len(past) < CALIBRATION_MIN:
            continue
        mean, sd = mean_and_sd(past)
        if sd <= 0.0:
            continue
        t = (contrast - mean) / (sd * math.sqrt(1.0 + 1.0 / len(past)))
        threshold = t_quantile(1.0 - alpha, len(past) - 1)
        side = _worse_side(direction, t, threshold)
        if side is not None and (best is None or abs(t) / threshold > abs(best["t"]) / best["threshold"]):
            best = {"cut": cut, "t": t, "threshold": threshold, "side": side, "contrast": contrast,
                    "nights_judged": len(past), "false_alarm": SHAPE_FALSE_ALARM}
    return best


def _drift(direction: str, levels: list[float], tonight: float, history: Sequence[Candidate],
           logical_date: str, *, few_steps: bool, recent_levels: Sequence[float] = (),
           recent_dates: Sequence[str] = ()) -> dict | None:
    """The slow-drift test: a ramp over the last nights, fitted against the whole series' own noise.

    The series is the trusted nights' levels (all against tonight's baseline), the untrusted
    nights since the last trusted one (``recent_levels``, judged against the same history) and
    tonight.  Its last ``k`` nights (:data:`DRIFT_RAMP_NIGHTS`, at most half the series) are fitted
    as a ramp from the level of the nights before them: ``level = a + b x r``, ``r = 0`` before the
    ramp and ``1, 2, ..., k`` on it.  The nights before the ramp fix the level it is measured from,
    so the drifting nights cannot drag it along; the residuals of every night give the noise, so
    one night's spread is measured on the whole series, not on a part of it.  On nights that vary
    independently around one level, ``t = b / se(b)`` is exactly Student's ``t`` with ``n - 2``
    degrees of freedom (a regression on a fixed regressor), bounded at :data:`DRIFT_FALSE_ALARM`.

    A step inside the ramp's nights fits a ramp too: the ramp is reported only when it fits the
    series better than the best single step (its residual sum of squares is smaller), a step
    being the level-shift and sustained-shift tests' to report.

    :param direction: the declaration's regression direction.
    :param levels: the trusted nights' levels, oldest first (``history`` order).
    :param tonight: tonight's level.
    :param history: the trusted nights.
    :param logical_date: tonight's logical date.
    :param few_steps: whether tonight has fewer than :data:`MANY_STEPS` judged steps (heavy tails).
    :param recent_levels: the levels of the untrusted nights since the last trusted one.
    :param recent_dates: their logical dates (for the drift's start).
    """
    if len(levels) < DRIFT_MIN:
        return None
    series = [*levels, *recent_levels, tonight]
    dates = [c.logical_date for c in history] + list(recent_dates) + [logical_date]
    n = len(series)
    k = min(DRIFT_RAMP_NIGHTS, n // 2)
    start = n - k
    ramp = [0.0] * start + [float(i) for i in range(1, k + 1)]
    r_mean = math.fsum(ramp) / n
    y_mean = math.fsum(series) / n
    sxx = math.fsum((r - r_mean) ** 2 for r in ramp)
    slope = math.fsum((r - r_mean) * (y - y_mean) for r, y in zip(ramp, series)) / sxx
    base = y_mean - slope * r_mean
    ss_ramp = math.fsum((y - base - slope * r) ** 2 for r, y in zip(ramp, series))
    if ss_ramp <= 0.0:
        return None
    t = slope / math.sqrt(ss_ramp / (n - 2) / sxx)
    one_sided = direction != "both"
    df = min(n - 2, HEAVY_TAIL_DF) if few_steps else n - 2
    threshold = t_quantile(1.0 - (DRIFT_FALSE_ALARM if one_sided else DRIFT_FALSE_ALARM / 2.0), df)
    side = _worse_side(direction, t, threshold)
    if side is None:
        return None
    # a step fits no worse than the ramp: it is a level change, not a drift
    total = math.fsum(series)
    squares = math.fsum(y * y for y in series)
    head = 0.0
    for j in range(1, n):
        head += series[j - 1]
        tail = total - head
        ss_step = squares - head * head / j - tail * tail / (n - j)
        if ss_step <= ss_ramp:
            return None
    # the report: the nights since the ramp began, its slope and the change against the level before it
    return {"start": dates[start], "slope": slope, "cumulative": slope * k, "side": side, "t": t,
            "threshold": threshold, "anchor_nights": start, "nights": k}
