"""Charts of the "Metric gate" UI, drawn on the server as inline SVG (no script, no CDN).

Every element a reader (or a test) looks for has a class: ``mg-point`` for each drawn value (with
``mg-trusted``, ``mg-untrusted``, ``mg-pending``, ``mg-shadow`` or ``mg-tonight``), ``mg-band`` for
the baseline band and ``mg-ref`` for the baseline reference.  The ``<svg>`` carries ``data-points``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from html import escape

from airflow_metric_gate.plugins.data import (
    KIND_PENDING,
    KIND_SHADOW,
    KIND_TONIGHT,
    KIND_TRUSTED,
    KIND_UNTRUSTED,
    MEASURE_Z,
    NightPoint,
    Point,
)

WIDTH, HEIGHT = 720, 240
LEFT, RIGHT, TOP, BOTTOM = 70, 16, 14, 44
#: A steps chart marks every value with a dot up to this many steps (a line only beyond).
MAX_STEP_DOTS = 400

LEGEND = (
    (KIND_TRUSTED, "trusted"),
    (KIND_UNTRUSTED, "untrusted"),
    (KIND_PENDING, "pending"),
    (KIND_SHADOW, "shadow"),
    (KIND_TONIGHT, "this run"),
)


def _fmt(x: float) -> str:
    return f"{x:.6g}"


class _Scale:
    def __init__(self, lo: float, hi: float, out_lo: float, out_hi: float) -> None:
        if not math.isfinite(lo) or not math.isfinite(hi):
            lo, hi = 0.0, 1.0
        if hi <= lo:
            pad = abs(lo) * 0.05 or 1.0
            lo, hi = lo - pad, hi + pad
        self.lo, self.hi, self.out_lo, self.out_hi = lo, hi, out_lo, out_hi

    def __call__(self, x: float) -> float:
        return self.out_lo + (x - self.lo) / (self.hi - self.lo) * (self.out_hi - self.out_lo)


def _y_range(values: Sequence[float]) -> tuple[float, float]:
    lo, hi = min(values), max(values)
    pad = (hi - lo) * 0.08 or abs(hi) * 0.05 or 1.0
    return lo - pad, hi + pad


def _axes(y: _Scale, x_labels: Sequence[tuple[float, str]]) -> list[str]:
    out = [
        f'<line class="mg-axis" x1="{LEFT}" y1="{TOP}" x2="{LEFT}" y2="{HEIGHT - BOTTOM}"/>',
        f'<line class="mg-axis" x1="{LEFT}" y1="{HEIGHT - BOTTOM}" x2="{WIDTH - RIGHT}" y2="{HEIGHT - BOTTOM}"/>',
    ]
    for i in range(5):
        value = y.lo + (y.hi - y.lo) * i / 4
        py = y(value)
        out.append(f'<line class="mg-grid" x1="{LEFT}" y1="{py:.1f}" x2="{WIDTH - RIGHT}" y2="{py:.1f}"/>')
        out.append(f'<text class="mg-tick" x="{LEFT - 6}" y="{py + 4:.1f}" text-anchor="end">{value:.4g}</text>')
    for i, (px, label) in enumerate(x_labels):
        anchor = "start" if i == 0 and len(x_labels) > 1 else ("end" if i == len(x_labels) - 1 and i else "middle")
        label_y = HEIGHT - BOTTOM + 16
        out.append(f'<text class="mg-tick" x="{px:.1f}" y="{label_y}" text-anchor="{anchor}">{escape(label)}</text>')
    return out


def _marker(kind: str, px: float, py: float, title: str, *, role: str = "mg-point") -> str:
    t = f"<title>{escape(title)}</title>"
    cls = f"{role} mg-{kind}"
    if kind == KIND_UNTRUSTED:
        d = f"M{px - 4:.1f},{py - 4:.1f}L{px + 4:.1f},{py + 4:.1f}M{px - 4:.1f},{py + 4:.1f}L{px + 4:.1f},{py - 4:.1f}"
        return f'<path class="{cls}" d="{d}">{t}</path>'
    if kind == KIND_SHADOW:
        d = f"M{px:.1f},{py - 5:.1f}L{px + 5:.1f},{py:.1f}L{px:.1f},{py + 5:.1f}L{px - 5:.1f},{py:.1f}Z"
        return f'<path class="{cls}" d="{d}">{t}</path>'
    radius = 6 if kind == KIND_TONIGHT else 3.5
    return f'<circle class="{cls}" cx="{px:.1f}" cy="{py:.1f}" r="{radius}">{t}</circle>'


def _legend(kinds: set[str], band: bool) -> list[str]:
    out, x = [], LEFT
    y = HEIGHT - 10
    if band:
        out.append(f'<rect class="mg-key mg-band-key" x="{x}" y="{y - 8}" width="14" height="10"/>')
        out.append(f'<text class="mg-legend" x="{x + 18}" y="{y}">band</text>')
        x += 60
    for kind, label in LEGEND:
        if kind not in kinds:
            continue
        out.append(_marker(kind, x + 5, y - 3, label, role="mg-key"))
        out.append(f'<text class="mg-legend" x="{x + 14}" y="{y}">{label}</text>')
        x += 24 + 7 * len(label)
    return out


def _svg(body: list[str], *, label: str, points: int, extra: str = "") -> str:
    return (
        f'<svg class="mg-chart" role="img" aria-label="{escape(label)}" data-points="{points}"{extra} '
        f'viewBox="0 0 {WIDTH} {HEIGHT}" width="{WIDTH}" height="{HEIGHT}" xmlns="http://www.w3.org/2000/svg">'
        + "".join(body)
        + "</svg>"
    )


def coordinate_chart(points: Sequence[Point], band: tuple[float, float, float] | None, *, label: str) -> str:
    """Draw one coordinate over nights: a point per run, the band and reference as drawn for this run.

    :param points: the nights, oldest first.
    :param band: ``(ref, lo, hi)`` of the run the page is about, or ``None`` (no baseline).
    :param label: the chart's accessible name.
    """
    if not points:
        return f'<p class="mg-empty">No stored value of {escape(label)} in this series.</p>'
    values = [p.value for p in points]
    if band is not None:
        values += [band[1], band[2]]
    y = _Scale(*_y_range(values), HEIGHT - BOTTOM, TOP)
    n = len(points)
    step = (WIDTH - LEFT - RIGHT - 20) / max(n - 1, 1)
    xs = [LEFT + 10 + i * step for i in range(n)] if n > 1 else [(LEFT + WIDTH - RIGHT) / 2]
    body = []
    if band is not None:
        ref, lo, hi = band
        top, bottom = y(hi), y(lo)
        body.append(
            f'<rect class="mg-band" data-lo="{_fmt(lo)}" data-hi="{_fmt(hi)}" x="{LEFT}" y="{top:.1f}" '
            f'width="{WIDTH - LEFT - RIGHT}" height="{max(bottom - top, 1):.1f}">'
            f"<title>band {_fmt(lo)}..{_fmt(hi)} around baseline {_fmt(ref)}</title></rect>"
        )
    labels = [(xs[0], f"{points[0].logical_date:%Y-%m-%d}")]
    if n > 1:
        labels.append((xs[-1], f"{points[-1].logical_date:%Y-%m-%d}"))
    body.extend(_axes(y, labels))
    if band is not None:
        body.append(
            f'<line class="mg-ref" data-ref="{_fmt(band[0])}" x1="{LEFT}" y1="{y(band[0]):.1f}" '
            f'x2="{WIDTH - RIGHT}" y2="{y(band[0]):.1f}"><title>baseline {_fmt(band[0])}</title></line>'
        )
    body.append(
        '<polyline class="mg-line" points="'
        + " ".join(f"{x:.1f},{y(p.value):.1f}" for x, p in zip(xs, points))
        + '"/>'
    )
    for x, p in zip(xs, points):
        title = f"{p.logical_date:%Y-%m-%d %H:%M} {_fmt(p.value)} ({p.role}, {p.status}) run {p.run_id}"
        body.append(_marker(p.kind, x, y(p.value), title))
    body.extend(_legend({p.kind for p in points}, band is not None))
    return _svg(body, label=label, points=n)


def steps_chart(
    values: Sequence[tuple[int, float]],
    bands: Mapping[int, tuple[float, float, float]],
    failing: set[int],
    *,
    label: str,
    band_kind: str = "reference",
) -> str:
    """Draw this run's values over training steps against the baseline band of each step.

    :param values: ``(step, value)`` in step order.
    :param bands: ``{step: (ref, lo, hi)}`` for the steps that have a baseline.
    :param failing: the steps whose value FAILed.
    :param label: the chart's accessible name.
    :param band_kind: ``reference`` (each step's band under the reference rule) or ``calibrated``
        (the calibrated policy's own step bands, as its verdict lists them); named in the legend
        and in ``data-band``.
    """
    if not values:
        return f'<p class="mg-empty">No stored values of {escape(label)} in this run.</p>'
    steps = [s for s, _ in values]
    all_y = [v for _, v in values] + [b for band in bands.values() for b in band[1:]]
    y = _Scale(*_y_range(all_y), HEIGHT - BOTTOM, TOP)
    x = _Scale(min(steps), max(steps), LEFT + 10, WIDTH - RIGHT - 10)
    body = []
    banded = [s for s in steps if s in bands]
    if banded:
        upper = " ".join(f"{x(s):.1f},{y(bands[s][2]):.1f}" for s in banded)
        lower = " ".join(f"{x(s):.1f},{y(bands[s][1]):.1f}" for s in reversed(banded))
        body.append(f'<polygon class="mg-band" data-steps="{len(banded)}" points="{upper} {lower}"/>')
    body.extend(_axes(y, [(x(steps[0]), f"step {steps[0]}"), (x(steps[-1]), f"step {steps[-1]}")]))
    if banded:
        ref = " ".join(f"{x(s):.1f},{y(bands[s][0]):.1f}" for s in banded)
        body.append(f'<polyline class="mg-ref" points="{ref}"/>')
    body.append(
        '<polyline class="mg-line mg-tonight-line" points="'
        + " ".join(f"{x(s):.1f},{y(v):.1f}" for s, v in values)
        + '"/>'
    )
    dots = len(values) <= MAX_STEP_DOTS
    for s, v in values:
        if dots or s in failing:
            kind = "fail" if s in failing else "pass"
            body.append(
                f'<circle class="mg-point mg-step-{kind}" cx="{x(s):.1f}" cy="{y(v):.1f}" r="2.5">'
                f"<title>step {s}: {_fmt(v)}{' (FAIL)' if s in failing else ''}</title></circle>"
            )
    legend_y = HEIGHT - 10
    body.append(f'<rect class="mg-key mg-band-key" x="{LEFT}" y="{legend_y - 8}" width="14" height="10"/>')
    key_text = "calibrated step band (as judged)" if band_kind == "calibrated" else "baseline band"
    fail_x = LEFT + 40 + 7 * len(key_text)
    body.append(f'<text class="mg-legend" x="{LEFT + 18}" y="{legend_y}">{key_text}</text>')
    body.append(
        f'<circle class="mg-key mg-step-fail" cx="{fail_x}" cy="{legend_y - 3}" r="3"/>'
        f'<text class="mg-legend" x="{fail_x + 8}" y="{legend_y}">FAIL</text>'
    )
    return _svg(body, label=label, points=len(values),
                extra=f' data-failing="{len(failing)}" data-band="{escape(band_kind)}"')


def night_chart(points: Sequence[NightPoint], measure: str, *, label: str) -> str:
    """Draw one declaration over the nights: its night measure, and the band each night was judged with.

    Under the calibrated policy the measure is the night statistic ``z`` and the band ``-q..q`` of each
    night; under the reference policy it is the worst distance outside a step's band (0: every step
    inside), so the band is its edge at 0.  Each point is a night (``mg-night-<outcome>``).

    :param points: the nights, oldest first (:func:`~airflow_metric_gate.plugins.data.night_points`).
    :param measure: ``z`` or ``distance``.
    :param label: the chart's accessible name.
    """
    if not points:
        return f'<p class="mg-empty">No night of {escape(label)} kept its night measure yet.</p>'
    # each banded night with its band: (night, lo, hi)
    banded = [(p, p.lo, p.hi) for p in points if p.lo is not None and p.hi is not None]
    y = _Scale(*_y_range([p.value for p in points] + [b for _, lo, hi in banded for b in (lo, hi)] + [0.0]),
               HEIGHT - BOTTOM, TOP)
    n = len(points)
    step = (WIDTH - LEFT - RIGHT - 20) / max(n - 1, 1)
    xs = [LEFT + 10 + i * step for i in range(n)] if n > 1 else [(LEFT + WIDTH - RIGHT) / 2]
    at = {p.run_id: x for x, p in zip(xs, points)}
    body = []
    if measure == MEASURE_Z and banded:
        upper = " ".join(f"{at[p.run_id]:.1f},{y(hi):.1f}" for p, _, hi in banded)
        lower = " ".join(f"{at[p.run_id]:.1f},{y(lo):.1f}" for p, lo, _ in reversed(banded))
        if len(banded) == 1:  # one night: a band as wide as a marker
            p, lo, hi = banded[0]
            x0 = at[p.run_id]
            upper = f"{x0 - 6:.1f},{y(hi):.1f} {x0 + 6:.1f},{y(hi):.1f}"
            lower = f"{x0 + 6:.1f},{y(lo):.1f} {x0 - 6:.1f},{y(lo):.1f}"
        body.append(f'<polygon class="mg-band" data-nights="{len(banded)}" points="{upper} {lower}"/>')
    labels = [(xs[0], f"{points[0].logical_date:%Y-%m-%d}")]
    if n > 1:
        labels.append((xs[-1], f"{points[-1].logical_date:%Y-%m-%d}"))
    body.extend(_axes(y, labels))
    zero = "baseline (z 0)" if measure == MEASURE_Z else "band edge (distance 0)"
    body.append(f'<line class="mg-ref" data-ref="0" x1="{LEFT}" y1="{y(0.0):.1f}" x2="{WIDTH - RIGHT}" '
                f'y2="{y(0.0):.1f}"><title>{zero}</title></line>')
    body.append('<polyline class="mg-line" points="'
                + " ".join(f"{x:.1f},{y(p.value):.1f}" for x, p in zip(xs, points)) + '"/>')
    for x, p in zip(xs, points):
        what = f"z {_fmt(p.value)}" + (f" (band -+{_fmt(p.hi)})" if measure == MEASURE_Z and p.hi is not None else "") \
            if measure == MEASURE_Z else f"worst distance {_fmt(p.value)}"
        title = f"{p.logical_date:%Y-%m-%d %H:%M} {p.outcome}: {what} run {p.run_id}"
        body.append(f'<circle class="mg-point mg-night mg-night-{escape(p.outcome)}" cx="{x:.1f}" '
                    f'cy="{y(p.value):.1f}" r="4"><title>{escape(title)}</title></circle>')
    legend_y = HEIGHT - 10
    key_text = "night band (-+q)" if measure == MEASURE_Z else "0 = every step inside its band"
    if measure == MEASURE_Z:
        body.append(f'<rect class="mg-key mg-band-key" x="{LEFT}" y="{legend_y - 8}" width="14" height="10"/>')
    body.append(f'<text class="mg-legend" x="{LEFT + 18}" y="{legend_y}">{key_text}</text>')
    return _svg(body, label=label, points=n, extra=f' data-measure="{measure}"')
