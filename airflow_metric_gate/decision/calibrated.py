"""The calibrated policy: one decision per declaration and night, calibrated on that declaration's own history.

The rules (docs/concepts.md, "The calibrated policy", is their contract):

* **The night statistic.**  Each step's value is standardised against the same step of the
  declaration's trusted nights: ``r = (value - median) / (1.4826 x MAD)``.  The night statistic
  ``L`` is the 20 % trimmed mean of the steps' ``r`` (a few benign spikes do not move it).
  A declaration whose trusted values are all positive is standardised on the log scale.
* **Calibration.**  The same statistic is computed for every trusted night of the history,
  each against the other nights (its own value left out of each step's median).  Tonight's ``L``
  is compared with those ``L``: ``z = (L - mean) / sd``, and the night fails when ``z`` is beyond
  Student's ``t`` prediction bound at :data:`FALSE_ALARM` on the regression side.  Whatever the
  number of steps, the shape of the per-step noise or the share of variation the steps have in
  common, the history's own nights show how far ``L`` moves on a clean night.
* **Direction.**  Only the declaration's regression side fails; beyond the band on the other side
  the night is reported as an improvement and passes (``direction: both`` fails either way).
* **Faults that need no history beyond one night:** a blow-up (half the steps or more at least
  :data:`BLOWUP_RATIO` times beyond anything their history had) fails, and steps that every recent
  trusted night had and tonight lacks are an ERROR, from the first night with history on.
  Non-finite values and a missing metric are ERRORs from selection.
* **Level shifts.**  A failing night that agrees with the failing night before it continues that
  night's level shift: it is reported once ("level shift since ..."), does not page again, and
  after :data:`SHIFT_ADOPT` such nights the shift is adopted as the new baseline (those nights'
  history, not one night) when nobody accepted or fixed it first.
* **Within the night.**  The later steps' deviations against the earlier steps' (a night that
  gets worse part-way, a plateau), calibrated on the same contrast of the trusted nights.
* **Slow drift.**  A ramp over the last :data:`DRIFT_RAMP_NIGHTS` nights is fitted against the
  level of the nights before it (which the drifting nights cannot drag along), its noise measured
  on the whole series, and kept only when it fits better than a single step: a drift on the
  regression side is reported with its start, slope and cumulative change, pages once, and is
  adopted like a level shift after :data:`SHIFT_ADOPT` nights.

Nothing here reads the store: :func:`choose_history` picks a declaration's history from the
candidate nights the caller read, and :func:`judge_declaration` judges one night.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from airflow_metric_gate.decision.deviations import _columns_plain, _deviations_plain, _Matrix
from airflow_metric_gate.decision.history import (
    Candidate,
    Decision,
    HistoryChoice,
    bridged_history,
    choose_history,
    cold_pool,
    night_trusted,
)
from airflow_metric_gate.decision.night_tests import (
    _better_side,
    _blowup,
    _drift,
    _fmt,
    _is_blowup,
    _level,
    _pct,
    _prior_band,
    _shape,
    _steps_text,
    _sustained,
    _worse_side,
)
from airflow_metric_gate.decision.parameters import (
    BLOWUP_RATIO,
    BRIDGE_REF_VARIANCE,
    CALIBRATION_MIN,
    DRIFT_MIN,
    EXPECTED_NIGHTS,
    FALSE_ALARM,
    HEAVY_TAIL_DF,
    MANY_STEPS,
    SHIFT_ADOPT,
)
from airflow_metric_gate.decision.policy import direction_of
from airflow_metric_gate.decision.stats import mean_and_sd, median_sorted, t_quantile, trimmed_mean
from airflow_metric_gate.enums import ERROR, FAIL, INACTIVE, PASS
from airflow_metric_gate.evaluation import Result

__all__ = [
    "BLOWUP_RATIO",
    "CALIBRATION_MIN",
    "DRIFT_MIN",
    "FALSE_ALARM",
    "SHIFT_ADOPT",
    "Candidate",
    "Decision",
    "HistoryChoice",
    "choose_history",
    "night_trusted",
    "judge_declaration",
]


#: Whether :func:`judge_declaration` works out the per-step statistics on a nights x steps matrix
#: (:class:`_Matrix`) rather than step by step (:func:`_columns_plain`, :func:`_deviations_plain`);
#: both give the same floats.  The tests switch it off to compare the two.
_VECTORISED = True


def judge_declaration(
    key: tuple[str, str, str],
    gate: Mapping[str, Any],
    tonight: Sequence[tuple[int, int | None, float]],
    choice: HistoryChoice,
    *,
    run_id: str,
    logical_date: str,
    min_history: int = CALIBRATION_MIN,
) -> Decision:
    """Judge one declaration's night under the calibrated policy.

    :param key: the declaration's ``(metric_key, steps_key, constraint_key)``.
    :param gate: the declaration as stored with the run.
    :param tonight: ``(step, at_step, value)`` of each selected value, in order.
    :param choice: its history (:func:`choose_history`).
    :param run_id: tonight's store run id (a level shift starting tonight is named by it).
    :param logical_date: tonight's logical date (ISO 8601).
    :param min_history: trusted nights needed before the night test judges (at least :data:`CALIBRATION_MIN`).
    """
    decision = _judge(key, gate, tonight, choice, run_id=run_id, logical_date=logical_date, min_history=min_history)
    if choice.adopted is not None:  # later nights keep the adopted level (see :func:`choose_history`)
        decision.stored["adopted_since"] = choice.adopted.run_id
    return decision


def _judge(key: tuple[str, str, str], gate: Mapping[str, Any], tonight: Sequence[tuple[int, int | None, float]],
           choice: HistoryChoice, *, run_id: str, logical_date: str, min_history: int) -> Decision:
    direction = direction_of(gate)
    history = choice.history
    n = len(history)
    need = max(min_history, CALIBRATION_MIN)
    report: dict[str, Any] = {"direction": direction, "nights": n}
    if choice.adopted is not None:
        report["adopted_shift"] = {"since": choice.adopted.logical_date, "since_run_id": choice.adopted.run_id,
                                   "nights": n}
    steps = [s for s, _, _ in tonight]
    # what the latest untrusted night since the last trusted one stored: a shift it started may continue tonight
    previous: Mapping[str, Any] = (choice.recent[-1].outcome if choice.recent else None) or {}

    def results(status: str, reason: str) -> list[Result]:
        return [Result(*key, step, at, status, current=value, n=n, reason=reason) for step, at, value in tonight]

    if n == 0:
        # no trusted night of this level yet (a cold start, or a rebaseline on a night that failed): a
        # blow-up is still judged, against the level's own untrusted nights so far that have any of
        # tonight's steps (evaluate reads no others; replay holds every step)
        pool = [c for c in cold_pool(choice) if any(step in c.values for step in steps)]
        if pool:
            columns = _columns_plain(steps, pool)
            refs = [median_sorted(column) if column else math.nan for column in columns]
            blown = [step for (step, _, value), ref, column in zip(tonight, refs, columns)
                     if column and _is_blowup(value, ref, column)]
            with_ref = sum(1 for c in columns if c)
            if with_ref and len(blown) * 2 >= with_ref:
                return _blowup(key, tonight, refs, columns, blown, report, len(pool), previous=previous,
                               run_id=run_id, logical_date=logical_date, nights="untrusted night(s) of this level")
        reason = f"cold start: no trusted night yet, {need} needed"
        return Decision("inactive", results(INACTIVE, reason), {"o": "inactive"}, report)

    # -- faults that need one night of history: missing steps, blow-ups ----------------------------
    if gate.get("steps_key") == '"all"':
        recent_nights = history[-EXPECTED_NIGHTS:]
        expected = set(recent_nights[0].values)
        for c in recent_nights[1:]:
            expected &= set(c.values)
        missing = sorted(expected.difference(steps))
        if missing:
            message = (f"{_steps_text(missing)} missing from tonight's record: each of the last "
                       f"{len(recent_nights)} trusted night(s) has them (a night that ended early, or steps lost)")
            error = Result(*key, None, None, ERROR, reason=message)
            report["missing_steps"] = missing[:50]
            report["missing_count"] = len(missing)
            return Decision("error", [error], {"o": "error", "cause": message}, report)

    # a new level (an accept, a rebaseline, an adopted shift) with a short history: the nights before it,
    # moved to the new level, fill the history up
    bridged = False
    if choice.bridge:
        filled = bridged_history(history, choice.bridge)
        if len(filled) >= need:
            bridged, history = True, filled
            report["bridge"] = {"nights_since": n, "nights_before": len(filled) - n,
                                "since": choice.history[0].logical_date}
    # the tests that compare tonight with the latest nights wait for a few nights of the new level
    settled = not bridged or n >= need

    matrix = _Matrix.of(steps, history) if _VECTORISED else None
    columns = matrix.columns() if matrix is not None else _columns_plain(steps, history)
    refs = [median_sorted(column) if column else math.nan for column in columns]
    blown = []
    for (step, _, value), ref, column in zip(tonight, refs, columns):
        if column and _is_blowup(value, ref, column):
            blown.append(step)
    with_ref = sum(1 for c in columns if c)
    if with_ref and len(blown) * 2 >= with_ref:
        return _blowup(key, tonight, refs, columns, blown, report, len(history) if bridged else n,
                       previous=previous, run_id=run_id, logical_date=logical_date)

    if n < need and not bridged:
        prior = _prior_band(key, gate, direction, tonight, refs, columns, report, n, need, previous=previous,
                            run_id=run_id, logical_date=logical_date)
        if prior is not None:
            return prior
        reason = f"calibrating: {n} trusted night(s), {need} needed for the night test"
        out = []
        for (step, at, value), column in zip(tonight, columns):
            out.append(Result(*key, step, at, INACTIVE, current=value, n=len(column), reason=reason))
        return Decision("inactive", out, {"o": "inactive"}, report)

    # -- the night statistic, tonight and for each trusted night against the others ---------------
    usable = max(3, (len(history) + 1) // 2)
    judged = [i for i, c in enumerate(columns) if len(c) >= usable]
    if not judged:
        reason = "no step of tonight's record is in enough trusted nights to judge"
        return Decision("inactive", results(INACTIVE, reason), {"o": "inactive"}, report)
    # a declaration whose trusted values are all positive is judged on the log scale (ratios)
    log_scale = all(columns[i][0] > 0.0 for i in judged)
    if matrix is not None:
        trefs, scales, floors, per_night_r, per_night_pos, per_night_rel = matrix.deviations(judged, refs, log_scale)
    else:
        trefs, scales, floors, per_night_r, per_night_pos, per_night_rel = _deviations_plain(
            judged, steps, columns, refs, history, log_scale)

    def scaled(i: int, v: float) -> float:
        if not log_scale:
            return v
        return max(math.log(v), floors[i]) if v > 0.0 else floors[i]

    r_tonight = [(scaled(i, tonight[i][2]) - trefs[i]) / scales[i] for i in judged]
    level_tonight = _level([tonight[i][2] for i in judged], [refs[i] for i in judged])
    statistic = trimmed_mean(r_tonight)
    past: list[float] = []
    levels: list[float] = []
    complete = None
    if matrix is not None:
        past, levels = matrix.night_means(per_night_r, per_night_rel)
        complete = matrix.complete()
    else:
        for rs, rel in zip(per_night_r, per_night_rel):
            if rs:
                past.append(trimmed_mean(rs))
                levels.append(trimmed_mean(rel))
    del matrix
    center, sd = mean_and_sd(past)
    sd = max(sd, 1e-9 * max(1.0, abs(center)))
    m = len(past)
    one_sided = direction != "both"
    # A night of few steps is as heavy-tailed as one step's noise, which a few nights cannot show:
    # its bound takes at most HEAVY_TAIL_DF degrees of freedom.  Many steps' trimmed mean is near normal.
    df = max(m - 1, 1) if len(judged) >= MANY_STEPS else min(max(m - 1, 1), HEAVY_TAIL_DF)
    # the new level of a bridged history is known from n nights only: its error widens the bound
    spread = 1.0 + 1.0 / m + (BRIDGE_REF_VARIANCE / n if bridged else 0.0)
    q = t_quantile(1.0 - (FALSE_ALARM if one_sided else FALSE_ALARM / 2.0), df) * math.sqrt(spread)
    z = (statistic - center) / sd
    zn = z / math.sqrt(1.0 + 1.0 / m)  # about unit variance on a clean night, whatever the history's length
    worse = _worse_side(direction, z, q)
    sustained = None
    if not worse:
        agrees = (previous.get("o") in ("fail", "shift") and previous.get("side")
                  and _worse_side(direction, z, q / 2.0) == previous["side"]
                  and abs(previous.get("z", math.inf) - z) <= q * math.sqrt(2.0))
        if agrees:  # tonight is as far off as the failing night before it: the shift goes on
            worse = previous["side"]
        elif not choice.recent and settled and len(past) == len(history):
            sustained = _sustained(direction, statistic, past, history, few_steps=len(judged) < MANY_STEPS)
            if sustained is not None:
                worse = sustained["side"]
    better = None if worse else _better_side(direction, z, q)
    report.update(statistic=statistic, center=center, sd=sd, z=z, threshold=q, level=level_tonight,
                  steps_judged=len(judged), false_alarm=FALSE_ALARM, scale="log" if log_scale else "linear")
    lo_r, hi_r = center - q * sd, center + q * sd
    step_results: list[Result] = []
    driving: list[int | None] = []
    metric_key, steps_key, constraint_key = key
    exp = math.exp
    for idx, (step, at, value) in enumerate(tonight):
        column = columns[idx]
        scale = scales.get(idx)
        if scale is None:
            step_results.append(Result(*key, step, at, INACTIVE, current=value, n=len(column),
                                       reason=f"in {len(column)} of {n} trusted night(s): too few to judge"))
            continue
        ref, tref = refs[idx], trefs[idx]
        lo, hi = tref + lo_r * scale, tref + hi_r * scale
        if log_scale:
            lo, hi = exp(min(lo, 700.0)), exp(min(hi, 700.0))
        side = "above" if value > hi else "below" if value < lo else None
        if side is None:  # the usual step: positional, the fields in their order
            step_results.append(Result(metric_key, steps_key, constraint_key, step, at, PASS, value, ref, len(column),
                                       lo, hi, None, None, "within band"))
            continue
        if worse and side == worse:
            driving.append(step)
            step_results.append(Result(
                metric_key, steps_key, constraint_key, step, at, FAIL, value, ref, len(column), lo, hi, side,
                "calibrated", f"{_fmt(value)} is {side} its step band [{_fmt(lo)}, {_fmt(hi)}] "
                              f"(median {_fmt(ref)} of {len(column)} trusted night(s)); the night fails"))
            continue
        verdict = "it passes" if not worse else "fails the other way"
        step_results.append(Result(
            metric_key, steps_key, constraint_key, step, at, PASS, value, ref, len(column), lo, hi, None, None,
            f"{_fmt(value)} is {side} its step band [{_fmt(lo)}, {_fmt(hi)}]; "
            f"the night as a whole is judged, and {verdict}"))
    if worse and not driving:  # a shift too small for any one step: every step on the failing side drove it
        for result in step_results:
            if result.status == PASS and result.ref is not None and result.current is not None and (
                    (result.current > result.ref) == (worse == "above")):
                result.status, result.side = FAIL, worse
                result.reason = (f"{_fmt(result.current)} is on the failing side of its median {_fmt(result.ref)}; "
                                 "the night fails as a whole")
                driving.append(result.step)
    report["side"] = worse
    if better:
        report["improvement"] = {"side": better, "level": level_tonight}
    against = (f"{m} trusted night(s), {len(history) - n} of them from before {choice.history[0].logical_date} "
               f"moved to the level of the {n} night(s) since" if bridged else f"{m} trusted night(s)")
    night_text = (f"whole night: the trimmed mean of {len(judged)} step(s)' deviations is z = {_fmt(z)} against "
                  f"{against} (band -+{_fmt(q)} at {FALSE_ALARM * 100:g} % false alarms); "
                  f"level {_pct(level_tonight)} against the baseline")

    if worse:
        continues = (previous.get("o") in ("fail", "shift") and previous.get("side") == worse
                     and previous.get("since") and abs(previous.get("z", math.inf) - z) <= q * math.sqrt(2.0))
        since_run = previous["since"] if continues else run_id
        since_date = previous.get("since_date", logical_date) if continues else logical_date
        if sustained is not None:
            since_run, since_date = sustained["since_run_id"], sustained["since"]
            report["sustained"] = sustained
        outcome = "shift" if continues else "fail"
        nights = (int(previous.get("nights", 1)) + 1) if continues else 1
        report["shift"] = {"since": since_date, "since_run_id": since_run, "nights": nights,
                           "change": level_tonight, "continues": bool(continues),
                           "adopt_after": SHIFT_ADOPT}
        driven = _steps_text(driving)
        held = (f"; {sustained['nights']} nights in a row off the baseline the same way (their z added up: "
                f"{_fmt(sustained['statistic'])} beyond {_fmt(sustained['threshold'])})" if sustained else "")
        text = (f"{night_text}{held}; level shift since {since_date}: {_pct(level_tonight)}"
                + (f" (night {nights}, reported on its first night; adopted as the baseline after {SHIFT_ADOPT} "
                   "nights unless accepted or fixed first)" if continues else "")
                + (f"; driven by {driven} {worse} their band" if driven else ""))
        night = Result(*key, None, None, FAIL, current=z, ref=0.0, n=m, lo=-q, hi=q, side=worse, bound="night",
                       reason=text)
        report["driven_by"] = driving[:50]
        report["driven_count"] = len(driving)
        stored = {"o": outcome, "side": worse, "z": z, "zn": zn, "level": level_tonight, "since": since_run,
                  "since_date": since_date, "nights": nights, "cause": f"{key[0]}: level {_pct(level_tonight)}"}
        return Decision(outcome, step_results + [night], stored, report)

    shape = (_shape(direction, r_tonight, per_night_r, per_night_pos, complete)
             if len(judged) >= MANY_STEPS and settled else None)
    if shape is not None:
        side, cut = shape["side"], shape["cut"]
        from_step = steps[judged[cut]]
        continues = bool(previous.get("shape") and previous.get("shape_side") == side
                         and previous.get("since"))
        since_run = previous["since"] if continues else run_id
        since_date = previous.get("since_date", logical_date) if continues else logical_date
        nights = (int(previous.get("nights", 1)) + 1) if continues else 1
        for pos in range(cut, len(judged)):
            result = step_results[judged[pos]]
            if result.ref is not None and result.current is not None and result.status == PASS and (
                    (result.current > result.ref) == (side == "above")) and result.current != result.ref:
                result.status, result.side, result.bound = FAIL, side, "calibrated"
                result.reason = (f"{_fmt(result.current)} is on the failing side of its median {_fmt(result.ref)} "
                                 f"from step {from_step} on, where the night got worse than its earlier steps")
                driving.append(result.step)
        shape.update(from_step=from_step, since=since_date, since_run_id=since_run, nights=nights,
                     continues=continues)
        report["shape"] = {k: v for k, v in shape.items() if k != "cut"}
        report["driven_by"] = driving[:50]
        report["driven_count"] = len(driving)
        text = (f"within the night: from step {from_step} on the steps are worse than the steps before it "
                f"(t = {_fmt(shape['t'])} against {shape['nights_judged']} trusted night(s)' same contrast, band "
                f"-+{_fmt(shape['threshold'])}); the night's level {_pct(level_tonight)} against the baseline"
                + (f" (night {nights} since {since_date}, reported on its first night)" if continues else ""))
        night = Result(*key, None, None, FAIL, current=shape["t"], ref=0.0, n=shape["nights_judged"],
                       lo=-shape["threshold"], hi=shape["threshold"], side=side, bound="shape", reason=text)
        outcome = "shift" if continues else "fail"
        stored = {"o": outcome, "shape": True, "shape_side": side, "z": z, "zn": zn,
                  "level": level_tonight, "since": since_run, "since_date": since_date, "nights": nights,
                  "cause": f"{key[0]}: worse from step {from_step} on"}
        return Decision(outcome, step_results + [night], stored, report)

    # the untrusted nights since the last trusted one were judged against this same history: their levels count
    since = [c for c in choice.recent if c.outcome and "level" in c.outcome]
    drift = None if not settled else _drift(
        direction, levels, level_tonight, history, logical_date, few_steps=len(judged) < MANY_STEPS,
        recent_levels=[float(c.outcome["level"]) for c in since if c.outcome],
        recent_dates=[c.logical_date for c in since])
    if drift is not None:
        continues = previous.get("o") in ("drift", "drift-continues")
        outcome = "drift-continues" if continues else "drift"
        drift_since = previous.get("since", run_id) if continues else run_id
        drift_date = previous.get("since_date", logical_date) if continues else logical_date
        drift["continues"] = bool(continues)
        # the night it was first reported: what an accept of it starts from
        drift["since_run_id"], drift["since"] = drift_since, drift_date
        report["drift"] = drift
        text = (f"slow drift since {drift['start']}: {drift['slope'] * 100:+.2f} % a night, "
                f"{_pct(drift['cumulative'])} over its {drift['nights']} night(s) against the {drift['anchor_nights']} "
                f"night(s) before it (t = {_fmt(drift['t'])}, band -+{_fmt(drift['threshold'])}); "
                "every night stayed within its own band")
        night = Result(*key, None, None, FAIL, current=drift["t"], ref=0.0, n=len(levels), lo=-drift["threshold"],
                       hi=drift["threshold"], side=drift["side"], bound="drift", reason=text)
        stored = {"o": outcome, "z": z, "zn": zn, "level": level_tonight, "since": drift_since,
                  "since_date": drift_date, "cause": f"{key[0]}: drift {_pct(drift['cumulative'])}"}
        return Decision(outcome, step_results + [night], stored, report)

    extra = []
    if better:
        extra.append(Result(*key, None, None, PASS, current=z, ref=0.0, n=m, lo=-q, hi=q, bound="improvement",
                            reason=f"{night_text}: an improvement ({better} the band), not a regression"))
    return Decision("pass", step_results + extra, {"o": "pass", "z": z, "zn": zn, "level": level_tonight}, report)


