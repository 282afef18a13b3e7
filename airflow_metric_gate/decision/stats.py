"""Small statistics the calibrated policy needs, in plain Python (numpy only to sort many rows at once).

Student's t quantiles come from the regularized incomplete beta function (a continued fraction,
evaluated by the modified Lentz method) and a bisection on the distribution function; both are
cached per degrees of freedom and level, so a night pays for them once.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from functools import lru_cache

import numpy as np

__all__ = ["mean_and_sd", "median_sorted", "ols_slope", "t_cdf", "t_quantile", "trimmed_mean", "trimmed_means"]

#: Share of the values cut from each end by :func:`trimmed_mean`.
TRIM = 0.2


def _beta_continued_fraction(a: float, b: float, x: float) -> float:
    tiny, eps = 1e-300, 1e-15
    qab, qap, qam = a + b, a + 1.0, a - 1.0
    c, d = 1.0, 1.0 - qab * x / qap
    d = 1.0 / (d if abs(d) > tiny else tiny)
    h = d
    for m in range(1, 400):
        m2 = 2 * m
        aa = m * (b - m) * x / ((qam + m2) * (a + m2))
        d = 1.0 + aa * d
        d = 1.0 / (d if abs(d) > tiny else tiny)
        c = 1.0 + aa / c
        c = c if abs(c) > tiny else tiny
        h *= d * c
        aa = -(a + m) * (qab + m) * x / ((a + m2) * (qap + m2))
        d = 1.0 + aa * d
        d = 1.0 / (d if abs(d) > tiny else tiny)
        c = 1.0 + aa / c
        c = c if abs(c) > tiny else tiny
        step = d * c
        h *= step
        if abs(step - 1.0) < eps:
            break
    return h


def _incomplete_beta(a: float, b: float, x: float) -> float:
    """The regularized incomplete beta function I_x(a, b) for 0 <= x <= 1."""
    if x <= 0.0:
        return 0.0
    if x >= 1.0:
        return 1.0
    front = math.exp(math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x))
    if x < (a + 1.0) / (a + b + 2.0):
        return front * _beta_continued_fraction(a, b, x) / a
    return 1.0 - front * _beta_continued_fraction(b, a, 1.0 - x) / b


def t_cdf(t: float, df: float) -> float:
    """Return P(T <= t) for Student's t with ``df`` degrees of freedom.

    :param t: the point.
    :param df: degrees of freedom (> 0).
    """
    tail = 0.5 * _incomplete_beta(df / 2.0, 0.5, df / (df + t * t))
    return 1.0 - tail if t > 0 else tail


@lru_cache(maxsize=4096)
def t_quantile(p: float, df: float) -> float:
    """Return the ``p`` quantile of Student's t with ``df`` degrees of freedom (0.5 < p < 1).

    :param p: the level, e.g. 0.999.
    :param df: degrees of freedom (> 0).
    """
    if not 0.5 < p < 1.0:
        raise ValueError(f"t_quantile needs 0.5 < p < 1, got {p!r}")
    lo, hi = 0.0, 1.0
    while t_cdf(hi, df) < p:
        hi *= 2.0
    for _ in range(200):
        mid = (lo + hi) / 2.0
        if t_cdf(mid, df) < p:
            lo = mid
        else:
            hi = mid
        if hi - lo < 1e-12 * max(1.0, hi):
            break
    return (lo + hi) / 2.0


def median_sorted(ordered: Sequence[float]) -> float:
    """Return the median of values already sorted ascending (non-empty).

    :param ordered: the values, sorted ascending.
    """
    n = len(ordered)
    mid = n // 2
    if n % 2:
        return ordered[mid]
    return ordered[mid - 1] / 2.0 + ordered[mid] / 2.0


def trimmed_mean(values: Sequence[float], trim: float = TRIM) -> float:
    """Return the mean of the values left after cutting ``trim`` of them from each end (non-empty).

    Robust to a few spikes (up to ``trim`` of the values on either side), nearly as efficient as
    the mean on well-behaved data.

    :param values: the values.
    :param trim: the share cut from each end, 0 <= trim < 0.5.
    """
    ordered = sorted(values)
    n = len(ordered)
    cut = int(n * trim)
    kept = ordered[cut:n - cut] if n - 2 * cut > 0 else ordered
    return math.fsum(kept) / len(kept)


def trimmed_means(rows: np.ndarray, trim: float = TRIM) -> list[float]:
    """Return :func:`trimmed_mean` of each row of a 2-D array of finite values, the same floats.

    The rows are sorted in one numpy call; each row's kept values are then summed exactly
    (:func:`math.fsum`), so the order equal values take in the sort does not matter.

    :param rows: one row per set of values (at least one column).
    :param trim: the share cut from each end, 0 <= trim < 0.5.
    """
    n = rows.shape[1]
    cut = int(n * trim)
    kept = np.sort(rows, axis=1)
    if n - 2 * cut > 0:
        kept = kept[:, cut:n - cut]
    width = kept.shape[1]
    return [math.fsum(row) / width for row in kept.tolist()]


def mean_and_sd(values: Sequence[float]) -> tuple[float, float]:
    """Return the mean and the sample standard deviation (``n - 1``; 0.0 for one value).

    :param values: the values (non-empty).
    """
    n = len(values)
    mean = math.fsum(values) / n
    if n < 2:
        return mean, 0.0
    return mean, math.sqrt(math.fsum((v - mean) ** 2 for v in values) / (n - 1))


def ols_slope(ys: Sequence[float]) -> tuple[float, float, float]:
    """Fit ``y = a + b x`` by least squares for ``x = 0, 1, ...``; return ``(b, its standard error, a)``.

    The standard error is ``inf`` with fewer than three points.

    :param ys: the values in order.
    """
    n = len(ys)
    xbar = (n - 1) / 2.0
    ybar = math.fsum(ys) / n
    sxx = math.fsum((i - xbar) ** 2 for i in range(n))
    if sxx == 0:
        return 0.0, math.inf, ybar
    b = math.fsum((i - xbar) * (y - ybar) for i, y in enumerate(ys)) / sxx
    a = ybar - b * xbar
    if n < 3:
        return b, math.inf, a
    resid = math.fsum((y - a - b * i) ** 2 for i, y in enumerate(ys))
    return b, math.sqrt(resid / (n - 2) / sxx), a
