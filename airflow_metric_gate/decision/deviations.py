"""Each step's deviation from its trusted nights, tonight's and each trusted night's (left out of its own median).

Two ways give the same floats: step by step (:func:`_columns_plain`, :func:`_deviations_plain`), and on a
nights x steps matrix (:class:`_Matrix`) when the history is rectangular enough.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from operator import itemgetter

import numpy as np

from airflow_metric_gate.decision.history import Candidate
from airflow_metric_gate.decision.parameters import _TINY, BLOWUP_RATIO, MAD_TO_SD
from airflow_metric_gate.decision.stats import median_sorted, trimmed_mean, trimmed_means
from airflow_metric_gate.step_values import StepIndex, StepValues


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

    __slots__ = ("values", "present", "order", "ordered", "counts", "dense")

    def __init__(self, values: np.ndarray) -> None:
        self.values = values
        self.present = ~np.isnan(values)
        self.order = np.argsort(values, axis=0, kind="stable")  # NaN (missing) last
        self.ordered = np.take_along_axis(values, self.order, axis=0)
        self.counts = self.present.sum(axis=0)
        #: the judged steps' deviations and relative values of every night (:meth:`deviations`), and
        #: which nights have all of them
        self.dense: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None

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
        every = itemgetter(*steps) if len(steps) > 1 else None
        index: StepIndex | None = None  # the steps of the last night read as one array, and tonight's among them
        at = np.empty(0, dtype=np.intp)
        for j, c in enumerate(history):
            got = c.values
            if not got:
                continue
            if isinstance(got, StepValues):  # read as one array: whole rows, no lookup per step
                if not _plain_floats(got.values_array):
                    return None
                if got.index is not index:
                    index, at = got.index, got.index.positions(steps)
                values[j] = got.taken(at)
                continue
            seen = np.fromiter(got.values(), dtype=float, count=len(got))
            if not _plain_floats(seen):
                return None
            try:  # a night with every one of tonight's steps, looked up in one call
                row = every(got) if every is not None else (got[steps[0]],)
            except KeyError:
                row = tuple(got.get(step, nan) for step in steps)
            values[j] = row
        return cls(values)

    def columns(self) -> list[list[float]]:
        """Each step's trusted values, sorted (as :func:`_columns_plain`)."""
        return [column[:k] for column, k in zip(self.ordered.T.tolist(), self.counts.tolist())]

    def deviations(self, judged: Sequence[int], refs: Sequence[float], log_scale: bool) -> _Deviations:
        """What :func:`_deviations_plain` returns, from the matrix.

        When every night has every judged step the per-night lists are left empty: the caller
        reads those nights from :attr:`dense` (:meth:`night_means`, :meth:`complete`).

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
        full = present.all(axis=1)
        self.dense = (r, rel, full)
        if bool(full.all()):  # every night has every judged step: the arrays are all the caller reads
            none: list = []
            return (dict(zip(judged, trefs.tolist())), dict(zip(judged, scales)), self._floors(judged, ordered),
                    [none] * len(present), [none] * len(present), [none] * len(present))
        everywhere = list(range(len(cols)))
        for j, (whole, row_r, row_rel) in enumerate(zip(full.tolist(), r.tolist(), rel.tolist())):
            if whole:
                per_night_r.append(row_r)
                per_night_pos.append(everywhere)
                per_night_rel.append(row_rel)
                continue
            mask = present[j]
            per_night_r.append(r[j][mask].tolist())
            per_night_pos.append(np.flatnonzero(mask).tolist())
            per_night_rel.append(rel[j][mask].tolist())
        return (dict(zip(judged, trefs.tolist())), dict(zip(judged, scales)), self._floors(judged, ordered),
                per_night_r, per_night_pos, per_night_rel)

    @staticmethod
    def _floors(judged: Sequence[int], ordered: np.ndarray) -> dict[int, float]:
        log_floor = 2.0 * math.log(BLOWUP_RATIO)
        return {i: t - log_floor for i, t in zip(judged, ordered[0].tolist())}


    def night_means(self, per_night_r: Sequence[list[float]],
                    per_night_rel: Sequence[list[float]]) -> tuple[list[float], list[float]]:
        """Each trusted night's trimmed mean deviation and level, for the nights with a judged step, in order.

        As :func:`~airflow_metric_gate.decision.stats.trimmed_mean` of each of :meth:`deviations`'
        lists, the nights that have every judged step sorted together (their lists are not read:
        when every night has every judged step, :meth:`deviations` leaves them empty).

        :param per_night_r: each night's deviations, from :meth:`deviations`.
        :param per_night_rel: each night's values relative to the steps' medians, from :meth:`deviations`.
        """
        assert self.dense is not None
        r, rel, full = self.dense
        whole = full.tolist()
        r_means = iter(trimmed_means(r[full]) if full.any() else [])
        rel_means = iter(trimmed_means(rel[full]) if full.any() else [])
        past: list[float] = []
        levels: list[float] = []
        for every, rs, rels in zip(whole, per_night_r, per_night_rel):
            if every:
                past.append(next(r_means))
                levels.append(next(rel_means))
            elif rs:
                past.append(trimmed_mean(rs))
                levels.append(trimmed_mean(rels))
        return past, levels

    def complete(self) -> np.ndarray | None:
        """Every night's judged steps' deviations when every night has all of them, else ``None``."""
        assert self.dense is not None
        r, _, full = self.dense
        return r if bool(full.all()) else None


def _plain_floats(values: np.ndarray) -> bool:
    """Whether every value is finite and none is a negative zero (what :meth:`_Matrix.of` can stand in for)."""
    return bool(np.isfinite(values).all()) and not bool((np.signbit(values) & (values == 0.0)).any())


def _median_of_columns(ordered: np.ndarray, counts: np.ndarray) -> np.ndarray:
    """Each column's median (as :func:`median_sorted`) of its first ``counts`` values, sorted ascending."""
    at = np.arange(ordered.shape[1])
    mid = counts // 2
    upper = ordered[mid, at]
    lower = ordered[np.maximum(mid - 1, 0), at]
    return np.where(counts % 2 == 1, upper, lower / 2.0 + upper / 2.0)
