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
from bisect import bisect_left
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from airflow_metric_gate.decision.policy import TRUSTING_OUTCOMES, direction_of
from airflow_metric_gate.decision.stats import mean_and_sd, median_sorted, t_quantile, trimmed_mean
from airflow_metric_gate.enums import ERROR, FAIL, INACTIVE, PASS
from airflow_metric_gate.evaluation import Result, band_limits, constraint_params

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
    "judge_declaration",
]

#: The false-alarm rate of one declaration's night test on its regression side (both sides
#: together for ``direction: both``).
FALSE_ALARM = 0.00025
#: The false-alarm rate of each sustained-shift test (2 and 3 nights in a row, see :data:`SUSTAINED_NIGHTS`).
SUSTAINED_FALSE_ALARM = 0.0001
#: The false-alarm rate of the drift test.
DRIFT_FALSE_ALARM = 0.0001
#: The false-alarm rate of the within-night test (all its split points together, see :data:`SHAPE_SPLITS`).
SHAPE_FALSE_ALARM = 0.00005
#: Where the within-night test splits a night's judged steps (fractions of them): the later part is
#: compared with the earlier part.
SHAPE_SPLITS = (0.25, 0.5, 0.75)
#: Judged steps each part of a split needs.
SHAPE_PART_MIN = 5
#: The sustained-shift test adds up the normalised ``z`` of this many nights in a row, tonight's included.
SUSTAINED_NIGHTS = (2, 3)
#: Trusted nights a declaration needs before its night test judges (fewer: INACTIVE, while the
#: faults that need no history are still judged).
CALIBRATION_MIN = 5
#: A value at least this many times the largest its history had (or at most the smallest divided by it) is a blow-up.
BLOWUP_RATIO = 5.0
#: Before the night test is calibrated, a night fails when at least this share of its steps leave the
#: constraint's band on the regression side.
PRIOR_SHARE = 0.25
#: Failing nights of one level shift after which it is adopted as the new baseline.
SHIFT_ADOPT = 5
#: The outcomes of the nights one reported change (a level shift or a drift) is adopted from.
ADOPTABLE = frozenset({"fail", "shift", "drift", "drift-continues"})
#: Trusted nights the drift test needs.
DRIFT_MIN = 10
#: The nights (tonight included) the drift test fits a ramp over; at most half the nights it judges.
DRIFT_RAMP_NIGHTS = 10
#: From this many judged steps on, the night statistic is taken as near normal (see :data:`HEAVY_TAIL_DF`).
MANY_STEPS = 20
#: The degrees of freedom, at most, of the night band of a declaration with fewer than
#: :data:`MANY_STEPS` steps (one value a night, say): its noise may be heavy-tailed.
HEAVY_TAIL_DF = 6
#: How many recent trusted nights must all have a step for tonight to miss it.
EXPECTED_NIGHTS = 3
#: 1 / Phi^-1(3/4): turns a median absolute deviation into a standard deviation for normal data.
MAD_TO_SD = 1.4826
_TINY = 1e-12


@dataclass
class Candidate:
    """An earlier baseline night of the series, as the caller read it, for one declaration.

    :param run_id: the store run id.
    :param logical_date: its logical date (ISO 8601), for messages.
    :param trusted: whether the night feeds this declaration's baselines (see :func:`night_trusted`).
    :param outcome: what the night's evaluation stored for this declaration, if anything.
    :param values: the declaration's values that night, by stored step.
    """

    run_id: str
    logical_date: str
    trusted: bool
    outcome: Mapping[str, Any] | None = None
    values: dict[int, float] = field(default_factory=dict)


def night_trusted(run_status: str, marked: str | None, outcome: Mapping[str, Any] | None) -> bool:
    """Decide whether an earlier night feeds one declaration's baselines (trust per declaration).

    A night a person marked follows the mark for every declaration; otherwise the declaration's
    own stored outcome decides (passed or not judged yet); a night evaluated before outcomes were
    stored follows the run's status.

    :param run_status: the run's status (``trusted`` or ``untrusted``).
    :param marked: the status of the latest mark made by hand, if any.
    :param outcome: the declaration's stored outcome that night.
    """
    if marked is not None:
        return marked == "trusted"
    if outcome is not None and "o" in outcome:
        return outcome["o"] in TRUSTING_OUTCOMES
    return run_status == "trusted"


@dataclass
class HistoryChoice:
    """The history :func:`choose_history` picked for one declaration.

    :param history: the trusted nights judged against, oldest first.
    :param recent: the untrusted nights since the last trusted one, oldest first.
    :param adopted: the level shift adopted as the new baseline (its first night), if one was.
    :param earlier: how many candidate nights there were at all (for naming a starved baseline).
    """

    history: list[Candidate]
    recent: list[Candidate]
    adopted: Candidate | None = None
    earlier: int = 0


def choose_history(candidates: Sequence[Candidate], history_limit: int) -> HistoryChoice:
    """Pick one declaration's baseline nights from the earlier nights of its series, newest last.

    The trusted nights (at most ``history_limit``, the most recent); but when the most recent
    nights are :data:`SHIFT_ADOPT` or more failing nights of one level shift, the shift is adopted:
    those nights are the history, and nothing before them.

    :param candidates: the earlier baseline nights since the rebaseline marker, oldest first.
    :param history_limit: at most this many nights.
    """
    recent: list[Candidate] = []
    for c in reversed(candidates):
        if c.trusted:
            break
        recent.append(c)
    recent.reverse()
    if len(recent) >= SHIFT_ADOPT:
        since = (recent[-1].outcome or {}).get("since")
        shift: list[Candidate] = []
        for c in reversed(recent):
            o = c.outcome or {}
            if since is None or o.get("since") != since or o.get("o") not in ADOPTABLE:
                break
            shift.append(c)
        if len(shift) >= SHIFT_ADOPT:
            shift.reverse()
            return HistoryChoice(shift[-history_limit:], [], adopted=shift[0], earlier=len(candidates))
    history = [c for c in candidates if c.trusted][-history_limit:]
    return HistoryChoice(history, recent, earlier=len(candidates))


@dataclass
class Decision:
    """What :func:`judge_declaration` decided for one declaration's night.

    :param outcome: ``pass``, ``inactive``, ``fail`` (a new regression), ``shift`` (a level shift
        continuing), ``drift``, ``drift-continues`` or ``error``.
    :param results: one result per step, then the night's own result when it has one.
    :param stored: what the store keeps of this night for the declaration's later nights.
    :param report: what the verdict says of the night (statistic, band, level shift, drift, ...).
    """

    outcome: str
    results: list[Result]
    stored: dict[str, Any]
    report: dict[str, Any]


def _fmt(x: float) -> str:
    return f"{x:.4g}"


def _pct(x: float) -> str:
    return f"{x * 100:+.1f} %"


class _LeaveOneOut:
    """The median of a sorted column with one of its values left out, in a few comparisons.

    Which value is left out only matters by its rank: below, at or above the middle, so the three
    possible medians are worked out once per column.
    """

    __slots__ = ("even", "cut_lo", "cut_hi", "low", "middle", "high")

    def __init__(self, ordered: Sequence[float]) -> None:
        m = len(ordered) - 1  # values left
        mid = m // 2
        self.even = m % 2 == 0
        if not self.even:  # one middle value left: v[mid] or v[mid + 1]
            self.cut_lo = ordered[mid]
            self.low, self.high = ordered[mid + 1], ordered[mid]
            self.cut_hi = self.middle = 0.0
        else:  # two middle values left
            self.cut_lo, self.cut_hi = ordered[mid - 1], ordered[mid]
            self.low = ordered[mid] / 2.0 + ordered[mid + 1] / 2.0  # a value from the lower part left out
            self.middle = ordered[mid - 1] / 2.0 + ordered[mid + 1] / 2.0  # the middle value left out
            self.high = ordered[mid - 1] / 2.0 + ordered[mid] / 2.0  # a value from the upper part left out

    def median_without(self, x: float) -> float:
        """The median with one value equal to ``x`` (one of the column's) left out."""
        if not self.even:
            return self.low if x <= self.cut_lo else self.high
        if x <= self.cut_lo:
            return self.low
        return self.middle if x <= self.cut_hi else self.high


def _scale(ordered: list[float], median: float) -> float:
    deviations = sorted(abs(v - median) for v in ordered)
    scale = MAD_TO_SD * median_sorted(deviations)
    if scale <= 0.0:  # more than half the nights agree exactly: use the mean absolute deviation
        scale = 1.2533 * math.fsum(deviations) / len(deviations)
    return scale if scale > 0.0 else max(abs(median) * 1e-9, _TINY)


#: Whether :func:`judge_declaration` works out the per-step statistics on a nights x steps matrix
#: (:class:`_Matrix`) rather than step by step (:func:`_columns_plain`, :func:`_deviations_plain`);
#: both give the same floats.  The tests switch it off to compare the two.
_VECTORISED = True

_Deviations = tuple[dict[int, float], dict[int, float], dict[int, float], list[list[float]], list[list[int]],
                    list[list[float]]]


def _columns_plain(steps: Sequence[int], history: Sequence[Candidate]) -> list[list[float]]:
    """Each of tonight's steps' trusted values, sorted: step by step."""
    return [sorted(c.values[step] for c in history if step in c.values) for step in steps]


def _deviations_plain(judged: Sequence[int], steps: Sequence[int], columns: Sequence[list[float]],
                      refs: Sequence[float], history: Sequence[Candidate], log_scale: bool) -> _Deviations:
    """The judged steps' centres, scales and log floors, and each trusted night's deviations: step by step.

    Returns ``(trefs, scales, floors, per_night_r, per_night_pos, per_night_rel)``: the first three
    by position in ``steps``; then, for each trusted night, its deviations (each step's value against
    the other nights, its own left out of the median), their positions among ``judged`` and its
    values relative to the steps' medians.
    """
    tcols = {i: [math.log(v) for v in columns[i]] for i in judged} if log_scale else {i: columns[i] for i in judged}
    floors = {i: tcols[i][0] - 2.0 * math.log(BLOWUP_RATIO) for i in judged}
    trefs = {i: median_sorted(tcols[i]) for i in judged}
    scales = {i: _scale(tcols[i], trefs[i]) for i in judged}
    per_night_r: list[list[float]] = [[] for _ in history]
    per_night_pos: list[list[int]] = [[] for _ in history]
    per_night_rel: list[list[float]] = [[] for _ in history]
    for pos, i in enumerate(judged):
        step, column, ref, scale, tref = steps[i], tcols[i], refs[i], scales[i], trefs[i]
        loo = _LeaveOneOut(column) if len(column) > 1 else None
        for j, c in enumerate(history):
            v = c.values.get(step)
            if v is None:
                continue
            t = math.log(v) if log_scale else v
            per_night_r[j].append((t - (loo.median_without(t) if loo is not None else tref)) / scale)
            per_night_pos[j].append(pos)
            per_night_rel[j].append(v / ref - 1.0 if abs(ref) > _TINY else 0.0)
    return trefs, scales, floors, per_night_r, per_night_pos, per_night_rel


class _Matrix:
    """One declaration's trusted values as a nights x steps matrix (NaN where a night lacks a step).

    What :func:`_columns_plain` and :func:`_deviations_plain` work out step by step, column by
    column in numpy, with the same floats: sorting, comparisons, and the element-wise ``+ - * /``
    are exact in both; a logarithm is taken with :func:`math.log`, and every sum the verdict shows
    stays a :func:`math.fsum` in the caller.  A history with a value that is not finite, or a
    negative zero (whose place among equal values a sort may change), is left to the step-by-step
    path (:meth:`of` returns ``None``).
    """

    __slots__ = ("values", "present", "order", "ordered", "counts")

    def __init__(self, values: np.ndarray) -> None:
        self.values = values
        self.present = ~np.isnan(values)
        self.order = np.argsort(values, axis=0, kind="stable")  # NaN (missing) last
        self.ordered = np.take_along_axis(values, self.order, axis=0)
        self.counts = self.present.sum(axis=0)

    @classmethod
    def of(cls, steps: Sequence[int], history: Sequence[Candidate]) -> _Matrix | None:
        """The matrix of tonight's steps in the trusted nights, or ``None`` when it cannot stand in.

        :param steps: tonight's steps, in order.
        :param history: the trusted nights.
        """
        if not history or not steps:
            return None
        values = np.full((len(history), len(steps)), np.nan)
        nan = math.nan
        for j, c in enumerate(history):
            got = c.values
            if not got:
                continue
            seen = np.fromiter(got.values(), dtype=float, count=len(got))
            if not np.isfinite(seen).all() or bool((np.signbit(seen) & (seen == 0.0)).any()):
                return None
            values[j] = [got.get(step, nan) for step in steps]
        return cls(values)

    def columns(self) -> list[list[float]]:
        """Each step's trusted values, sorted (as :func:`_columns_plain`)."""
        return [column[:k] for column, k in zip(self.ordered.T.tolist(), self.counts.tolist())]

    def deviations(self, judged: Sequence[int], refs: Sequence[float], log_scale: bool) -> _Deviations:
        """What :func:`_deviations_plain` returns, from the matrix.

        :param judged: the positions of the judged steps among tonight's (each in 3 nights or more).
        :param refs: each of tonight's steps' median (of its values, not their logarithms).
        :param log_scale: whether the steps are judged on the log scale.
        """
        cols = np.asarray(judged, dtype=np.intp)
        ordered = self.ordered[:, cols]
        if log_scale:  # math.log, value by value: numpy's logarithm may round otherwise
            ordered = np.array(list(map(math.log, ordered.ravel().tolist())), dtype=float).reshape(ordered.shape)
            values = np.empty_like(ordered)
            np.put_along_axis(values, self.order[:, cols], ordered, axis=0)
        else:
            values = self.values[:, cols]
        present = self.present[:, cols]
        counts = self.counts[cols]
        at = np.arange(len(cols))
        with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
            trefs = _median_of_columns(ordered, counts)
            deviations = np.sort(np.abs(ordered - trefs), axis=0)  # NaN (missing) last
            mads = _median_of_columns(deviations, counts)
            scales: list[float] = []
            for pos, (mad, tref) in enumerate(zip(mads.tolist(), trefs.tolist())):
                scale = MAD_TO_SD * mad
                if scale <= 0.0:  # as _scale: the mean absolute deviation
                    kept = deviations[: int(counts[pos]), pos].tolist()
                    scale = 1.2533 * math.fsum(kept) / len(kept)
                scales.append(scale if scale > 0.0 else max(abs(tref) * 1e-9, _TINY))
            # the median with each night's own value left out (see _LeaveOneOut): by its rank only
            left = counts - 1
            mid = left // 2
            even = left % 2 == 0
            below, at_mid = ordered[np.maximum(mid - 1, 0), at], ordered[mid, at]
            above = ordered[np.minimum(mid + 1, counts - 1), at]
            cut_lo = np.where(even, below, at_mid)
            low = np.where(even, at_mid / 2.0 + above / 2.0, above)
            middle = below / 2.0 + above / 2.0
            high = np.where(even, below / 2.0 + at_mid / 2.0, at_mid)
            loo = np.where(values <= cut_lo, low, np.where(even & (values <= at_mid), middle, high))
            r = (values - loo) / np.asarray(scales)
            ref = np.asarray([refs[i] for i in judged], dtype=float)
            rel = np.where(np.abs(ref) > _TINY, self.values[:, cols] / ref - 1.0, 0.0)
        per_night_r: list[list[float]] = []
        per_night_pos: list[list[int]] = []
        per_night_rel: list[list[float]] = []
        for j in range(len(present)):
            mask = present[j]
            per_night_r.append(r[j][mask].tolist())
            per_night_pos.append(np.flatnonzero(mask).tolist())
            per_night_rel.append(rel[j][mask].tolist())
        first = ordered[0].tolist()
        log_floor = 2.0 * math.log(BLOWUP_RATIO)
        return (dict(zip(judged, trefs.tolist())), dict(zip(judged, scales)),
                {i: t - log_floor for i, t in zip(judged, first)}, per_night_r, per_night_pos, per_night_rel)


def _median_of_columns(ordered: np.ndarray, counts: np.ndarray) -> np.ndarray:
    """Each column's median (as :func:`median_sorted`) of its first ``counts`` values, sorted ascending."""
    at = np.arange(ordered.shape[1])
    mid = counts // 2
    upper = ordered[mid, at]
    lower = ordered[np.maximum(mid - 1, 0), at]
    return np.where(counts % 2 == 1, upper, lower / 2.0 + upper / 2.0)


def _steps_text(steps: Sequence[int | None]) -> str:
    shown = [s for s in steps if s is not None]
    if not shown:
        return ""
    if len(shown) <= 6:
        return "step(s) " + ", ".join(str(s) for s in shown)
    return f"{len(shown)} steps ({shown[0]} to {shown[-1]})"


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
    direction = direction_of(gate)
    history = choice.history
    n = len(history)
    need = max(min_history, CALIBRATION_MIN)
    report: dict[str, Any] = {"direction": direction, "nights": n}
    if choice.adopted is not None:
        report["adopted_shift"] = {"since": choice.adopted.logical_date, "since_run_id": choice.adopted.run_id,
                                   "nights": n}
    steps = [s for s, _, _ in tonight]

    def results(status: str, reason: str) -> list[Result]:
        return [Result(*key, step, at, status, current=value, n=n, reason=reason) for step, at, value in tonight]

    if n == 0:
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

    matrix = _Matrix.of(steps, history) if _VECTORISED else None
    columns = matrix.columns() if matrix is not None else _columns_plain(steps, history)
    refs = [median_sorted(column) if column else math.nan for column in columns]
    blown = []
    for (step, _, value), ref, column in zip(tonight, refs, columns):
        if column and _is_blowup(value, ref, column):
            blown.append(step)
    with_ref = sum(1 for c in columns if c)
    if with_ref and len(blown) * 2 >= with_ref:
        return _blowup(key, tonight, refs, columns, blown, report, run_id, n)

    if n < need:
        prior = _prior_band(key, gate, direction, tonight, refs, columns, report, n, need)
        if prior is not None:
            return prior
        reason = f"calibrating: {n} trusted night(s), {need} needed for the night test"
        out = []
        for (step, at, value), column in zip(tonight, columns):
            out.append(Result(*key, step, at, INACTIVE, current=value, n=len(column), reason=reason))
        return Decision("inactive", out, {"o": "inactive"}, report)

    # -- the night statistic, tonight and for each trusted night against the others ---------------
    usable = max(3, (n + 1) // 2)
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
    del matrix
    past: list[float] = []
    levels: list[float] = []
    for rs, rel in zip(per_night_r, per_night_rel):
        if rs:
            past.append(trimmed_mean(rs))
            levels.append(trimmed_mean(rel))
    center, sd = mean_and_sd(past)
    sd = max(sd, 1e-9 * max(1.0, abs(center)))
    m = len(past)
    one_sided = direction != "both"
    # A night of few steps is as heavy-tailed as one step's noise, which a few nights cannot show:
    # its bound takes at most HEAVY_TAIL_DF degrees of freedom.  Many steps' trimmed mean is near normal.
    df = max(m - 1, 1) if len(judged) >= MANY_STEPS else min(max(m - 1, 1), HEAVY_TAIL_DF)
    q = t_quantile(1.0 - (FALSE_ALARM if one_sided else FALSE_ALARM / 2.0), df) * math.sqrt(1.0 + 1.0 / m)
    z = (statistic - center) / sd
    zn = z / math.sqrt(1.0 + 1.0 / m)  # about unit variance on a clean night, whatever the history's length
    worse = _worse_side(direction, z, q)
    previous: Mapping[str, Any] = (choice.recent[-1].outcome if choice.recent else None) or {}
    sustained = None
    if not worse:
        agrees = (previous.get("o") in ("fail", "shift") and previous.get("side")
                  and _worse_side(direction, z, q / 2.0) == previous["side"]
                  and abs(previous.get("z", math.inf) - z) <= q * math.sqrt(2.0))
        if agrees:  # tonight is as far off as the failing night before it: the shift goes on
            worse = previous["side"]
        elif not choice.recent and len(past) == len(history):
            sustained = _sustained(direction, statistic, past, history, few_steps=len(judged) < MANY_STEPS)
            if sustained is not None:
                worse = sustained["side"]
    better = None if worse else _better_side(direction, z, q)
    report.update(statistic=statistic, center=center, sd=sd, z=z, threshold=q, level=level_tonight,
                  steps_judged=len(judged), false_alarm=FALSE_ALARM, scale="log" if log_scale else "linear")
    lo_r, hi_r = center - q * sd, center + q * sd
    step_results: list[Result] = []
    driving: list[int | None] = []
    for idx, (step, at, value) in enumerate(tonight):
        column = columns[idx]
        if idx not in scales:
            step_results.append(Result(*key, step, at, INACTIVE, current=value, n=len(column),
                                       reason=f"in {len(column)} of {n} trusted night(s): too few to judge"))
            continue
        ref, scale, tref = refs[idx], scales[idx], trefs[idx]
        lo, hi = tref + lo_r * scale, tref + hi_r * scale
        if log_scale:
            lo, hi = math.exp(min(lo, 700.0)), math.exp(min(hi, 700.0))
        result = Result(*key, step, at, PASS, current=value, ref=ref, n=len(column), lo=lo, hi=hi, bound="calibrated")
        side = "above" if value > hi else "below" if value < lo else None
        if worse and side == worse:
            result.status, result.side = FAIL, side
            driving.append(step)
            result.reason = (f"{_fmt(value)} is {side} its step band [{_fmt(lo)}, {_fmt(hi)}] "
                             f"(median {_fmt(ref)} of {len(column)} trusted night(s)); the night fails")
        elif side:
            result.side, result.bound = None, None
            verdict = "it passes" if not worse else "fails the other way"
            result.reason = (f"{_fmt(value)} is {side} its step band [{_fmt(lo)}, {_fmt(hi)}]; "
                             f"the night as a whole is judged, and {verdict}")
        else:
            result.bound = None
            result.reason = "within band"
        step_results.append(result)
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
    night_text = (f"whole night: the trimmed mean of {len(judged)} step(s)' deviations is z = {_fmt(z)} against "
                  f"{m} trusted night(s) (band -+{_fmt(q)} at {FALSE_ALARM * 100:g} % false alarms); "
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

    shape = _shape(direction, r_tonight, per_night_r, per_night_pos) if len(judged) >= MANY_STEPS else None
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
    drift = _drift(direction, levels, level_tonight, history, logical_date, few_steps=len(judged) < MANY_STEPS,
                   recent_levels=[float(c.outcome["level"]) for c in since if c.outcome],
                   recent_dates=[c.logical_date for c in since])
    if drift is not None:
        continues = previous.get("o") in ("drift", "drift-continues")
        outcome = "drift-continues" if continues else "drift"
        drift_since = previous.get("since", run_id) if continues else run_id
        drift["continues"] = bool(continues)
        report["drift"] = drift
        text = (f"slow drift since {drift['start']}: {drift['slope'] * 100:+.2f} % a night, "
                f"{_pct(drift['cumulative'])} over its {drift['nights']} night(s) against the {drift['anchor_nights']} "
                f"night(s) before it (t = {_fmt(drift['t'])}, band -+{_fmt(drift['threshold'])}); "
                "every night stayed within its own band")
        night = Result(*key, None, None, FAIL, current=drift["t"], ref=0.0, n=len(levels), lo=-drift["threshold"],
                       hi=drift["threshold"], side=drift["side"], bound="drift", reason=text)
        stored = {"o": outcome, "z": z, "zn": zn, "level": level_tonight, "since": drift_since,
                  "cause": f"{key[0]}: drift {_pct(drift['cumulative'])}"}
        return Decision(outcome, step_results + [night], stored, report)

    extra = []
    if better:
        extra.append(Result(*key, None, None, PASS, current=z, ref=0.0, n=m, lo=-q, hi=q, bound="improvement",
                            reason=f"{night_text}: an improvement ({better} the band), not a regression"))
    return Decision("pass", step_results + extra, {"o": "pass", "z": z, "zn": zn, "level": level_tonight}, report)


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


def _blowup(key: tuple[str, str, str], tonight, refs, columns, blown, report, run_id, n) -> Decision:
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
                                     f"{len(column)} trusted night(s) had ([{_fmt(column[0])}, {_fmt(column[-1])}]): "
                                     "a blow-up"))
        else:
            out.append(Result(*key, step, at, PASS, current=value, ref=None if not column else ref, n=len(column),
                              reason="not blown up"))
    text = (f"blow-up: {_steps_text(sorted(blown_set))} ({len(blown_set)} of {len(tonight)}) at least "
            f"{BLOWUP_RATIO:g}x beyond anything their {n} trusted night(s) had; judged with any history")
    out.append(Result(*key, None, None, FAIL, n=n, bound="blowup", reason=text))
    report["blowup"] = {"steps": sorted(blown_set)[:50], "count": len(blown_set)}
    stored = {"o": "fail", "blowup": True, "cause": f"{key[0]}: blow-up"}
    return Decision("fail", out, stored, report)


def _prior_band(key: tuple[str, str, str], gate, direction, tonight, refs, columns, report, n, need) -> Decision | None:
    """Before the night test is calibrated: a quarter of the steps or more beyond the constraint's band.

    The declaration's constraint (its own, or the defaults table's) is the prior: with fewer than
    ``need`` trusted nights the night fails when at least :data:`PRIOR_SHARE` of its steps that
    have a median leave that band on the side that is a regression.  A few noisy steps fail nothing.
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
    side = out[next(i for i, r in enumerate(out) if r.status == FAIL)].side
    text = (f"calibrating ({n} of {need} trusted nights): {_steps_text(outside)} ({len(outside)} of {judged}) "
            f"{side} the constraint's band on the regression side")
    out.append(Result(*key, None, None, FAIL, n=n, side=side, bound="constraint", reason=text))
    report["prior"] = {"steps": outside[:50], "count": len(outside)}
    stored = {"o": "fail", "side": side, "cause": f"{key[0]}: {len(outside)} step(s) {side} the constraint's band"}
    return Decision("fail", out, stored, report)


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
           per_night_pos: Sequence[Sequence[int]]) -> dict | None:
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
