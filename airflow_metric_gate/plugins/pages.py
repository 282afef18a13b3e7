"""The HTML of the "Metric gate" UI pages (no Airflow; every value escaped, every link relative).

The pages live side by side under the plugin's URL prefix (``./``, ``series``, ``task``, ``mark``),
so relative links work behind any prefix or ``[api] base_url``.  No script is used: the Airflow UI
shows external views in a sandboxed iframe.  The document and its stylesheet are
:mod:`airflow_metric_gate.plugins.layout`'s, the forms :mod:`airflow_metric_gate.plugins.forms`'.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from html import escape

from airflow_metric_gate.decision.policy import TRUSTING_OUTCOMES
from airflow_metric_gate.evaluation import ERROR, FAIL, INACTIVE, PASS, STATUSES
from airflow_metric_gate.plugins.data import ATTENTION_OUTCOMES, status_counts, steps_label, summary_text
from airflow_metric_gate.plugins.forms import MarkForm, mark_form
from airflow_metric_gate.plugins.layout import STYLE as STYLE  # the pages' stylesheet, named where they are
from airflow_metric_gate.plugins.layout import _num, _q, _step, page, series_link
from airflow_metric_gate.store import RunRow


def index_page(identities: Sequence[Mapping], *, hidden: int) -> str:
    """The navigation entry: every series identity the user may read.

    :param identities: rows of :meth:`~airflow_metric_gate.store.MetricStore.series_identities`,
        already filtered to readable DAGs.
    :param hidden: how many series the user may not read (only counted).
    """
    rows = []
    for i in identities:
        link = series_link(i["series"], i["backend"], i["suite"])
        rows.append(
            f"<tr><td><a href=\"{escape(link)}\">{escape(i['series'])}</a></td><td>{escape(i['backend'])}</td>"
            f"<td>{escape(i['suite'])}</td><td>{escape(i['dag_id'] or '(outside Airflow)')}</td>"
            f"<td>{i['runs']}</td><td>{i['latest']:%Y-%m-%d %H:%M}</td></tr>"
        )
    table = (
        "<table class=\"mg-series\"><tr><th>series</th><th>backend</th><th>suite</th><th>written by DAG</th>"
        "<th>runs</th><th>latest logical date</th></tr>" + "".join(rows) + "</table>"
        if rows else "<p class=\"mg-empty\">No series you may read is in the metric store yet.</p>"
    )
    note = f"<p class=\"mg-muted\">{hidden} more series written by DAGs you may not read.</p>" if hidden else ""
    return page("Metric gate", "<h1>Metric gate: series</h1>" + table + note)




def overview_table(identity: tuple[str, str, str], grid: Sequence[tuple[RunRow, list[str]]],
                   declarations: Sequence[Mapping], nights: int) -> str:
    """Return the series overview: nights (rows, newest first) by declarations, each cell its night's outcome.

    Each cell links to the chart of that declaration on this page.

    :param identity: ``(series, backend, suite)``.
    :param grid: :func:`~airflow_metric_gate.plugins.data.overview_grid`.
    :param declarations: the columns.
    :param nights: the chart's nights.
    """
    if not grid or not declarations:
        return ""
    series, backend, suite = identity
    head = "".join(
        f"<th title=\"{escape(d['metric_key'])}\">{escape(d['metric_key'])}<br><span class=\"mg-muted\">"
        f"{escape(steps_label(d['steps_key']))}</span></th>" for d in declarations
    )
    rows = []
    for run, outcomes in grid:
        cells = []
        for d, outcome in zip(declarations, outcomes):
            link = series_link(series, backend, suite, nights=nights,
                               declaration=json.dumps([d["metric_key"], d["steps_key"], d["constraint_key"]]))
            trust = ("; feeds its history" if outcome in TRUSTING_OUTCOMES else
                     "; does not feed its history" if outcome in ATTENTION_OUTCOMES else "")
            label = f"{run.logical_date:%Y-%m-%d} {d['metric_key']}: {outcome}{trust}"
            cells.append(f"<td class=\"mg-cell mg-o-{escape(outcome)}\"><a href=\"{escape(link)}\" "
                         f"title=\"{escape(label)}\" aria-label=\"{escape(label)}\"></a></td>")
        rows.append(f"<tr><td>{run.logical_date:%Y-%m-%d}</td><td>{escape(run.status)}</td>{''.join(cells)}</tr>")
    legend = ("<p class=\"mg-muted\">Each cell is a night of a declaration: green pass, grey cold start, red fail, "
              "purple level shift, orange drift, brown error. A cell opens that declaration's chart.</p>")
    return ("<h2>Overview</h2><table class=\"mg-grid\"><tr><th>night</th><th>status</th>" + head + "</tr>"
            + "".join(rows) + "</table>" + legend)


def _counts_cells(run: RunRow) -> str:
    counts = status_counts(run.status_reason)
    if counts is None:
        return "".join("<td>-</td>" for _ in STATUSES)
    return "".join(f"<td>{counts[s]}</td>" for s in STATUSES)


def _provenance(run: RunRow) -> str:
    prov = run.provenance or {}
    parts = []
    for key in ("dag_id", "airflow_run_id", "commit_sha", "training_job_id"):
        if prov.get(key):
            parts.append(f"{key}={prov[key]}")
    marks = prov.get("marks") or []
    if marks:  # from the UI, the command line or the approval step: who, when and why
        last = marks[-1]
        when = str(last.get("at") or "")[:16].replace("T", " ")
        what = "accepted the level" if last.get("accept") else f"marked {last.get('status')}"
        parts.append(f"{what} by {last.get('by')} at {when} UTC: {last.get('reason')}")
    return escape("; ".join(parts)) or "-"


@dataclass
class Picker:
    """The metric and coordinate chosen on a series page, and the choices."""

    declarations: list[dict] = field(default_factory=list)
    steps: list[int] = field(default_factory=list)
    metric_key: str | None = None
    steps_key: str | None = None
    constraint_key: str | None = None
    step: int | None = None
    nights: int = 60


def _picker(identity: tuple[str, str, str], picker: Picker) -> str:
    series, backend, suite = identity
    options = []
    for d in picker.declarations:
        value = json.dumps([d["metric_key"], d["steps_key"], d["constraint_key"]])
        chosen = (d["metric_key"], d["steps_key"], d["constraint_key"]) == (
            picker.metric_key, picker.steps_key, picker.constraint_key
        )
        label = f"{d['metric_key']} (steps {steps_label(d['steps_key'])})"
        options.append(
            f"<option value=\"{escape(value)}\"{' selected' if chosen else ''}>{escape(label)}</option>"
        )
    hidden = "".join(
        f"<input type=\"hidden\" name=\"{k}\" value=\"{escape(v)}\">"
        for k, v in (("series", series), ("backend", backend), ("suite", suite))
    )
    step_field = ""
    if picker.steps:
        step_options = "".join(
            f"<option{' selected' if s == picker.step else ''}>{s}</option>" for s in picker.steps
        )
        step_field = f" step <select name=\"step\">{step_options}</select>"
    return (
        f"<form class=\"mg-picker\" method=\"get\" action=\"series\">{hidden}"
        f"metric <select name=\"declaration\">{''.join(options)}</select>{step_field} "
        f"nights <input name=\"nights\" type=\"number\" min=\"2\" max=\"365\" value=\"{picker.nights}\"> "
        "<button type=\"submit\">chart</button></form>"
    )


def series_page(
    identity: tuple[str, str, str],
    runs: Sequence[RunRow],
    *,
    page_number: int,
    has_next: bool,
    picker: Picker,
    chart: str,
    mark_forms: Mapping[str, MarkForm],
    flash: str | None = None,
    overview: str = "",
    nights_chart: str = "",
) -> str:
    """The runs of one series identity: the overview grid, the chart of the chosen coordinate, the runs.

    :param identity: ``(series, backend, suite)``.
    :param runs: this page's runs, newest first.
    :param page_number: 1-based page number.
    :param has_next: whether an older page exists.
    :param picker: the chosen metric and coordinate.
    :param chart: the chart's HTML (may be empty).
    :param mark_forms: the runs the user may mark, by store run id.
    :param flash: a one-line note to show on top.
    :param overview: the overview grid's HTML (:func:`overview_table`).
    :param nights_chart: the chosen declaration's night chart
        (:func:`~airflow_metric_gate.plugins.charts.night_chart`; may be empty).
    """
    series, backend, suite = identity
    keep = {"declaration": json.dumps([picker.metric_key, picker.steps_key, picker.constraint_key])
            if picker.metric_key else None, "step": picker.step, "nights": picker.nights}
    head = (
        f"<h1>Metric gate: {escape(series)} <span class=\"mg-muted\">({escape(backend)}, {escape(suite)})</span></h1>"
        "<p><a href=\"./\">all series</a></p>"
    )
    if flash:
        head += f"<p class=\"mg-flash\">{escape(flash)}</p>"
    chart_block = ""
    if nights_chart and picker.metric_key is not None:
        chart_block += (
            f"<h2 class=\"mg-nights-head\">{escape(picker.metric_key)} (steps "
            f"{escape(steps_label(picker.steps_key or ''))}) over the nights</h2>" + nights_chart
            + "<p class=\"mg-muted\">Calibrated policy: each night's statistic z (the trimmed mean of its steps' "
            "deviations, against the same statistic on this declaration's trusted nights) and the band -+q it was "
            "judged with. Reference policy: each night's worst distance outside a step's band, relative to that "
            "step's baseline (0: every step inside).</p>"
        )
    chart_block += "<h2>History of a coordinate</h2>" + _picker(identity, picker)
    if picker.metric_key is not None:
        step = "-" if picker.step is None else ("last" if picker.step == -1 else str(picker.step))
        chart_block += (
            f"<h3>{escape(picker.metric_key)} (steps {escape(steps_label(picker.steps_key or ''))}), "
            f"step {escape(step)}</h3>" + chart
        )
    rows = []
    for r in runs:
        action = mark_form(r, mark_forms[r.run_id]) if r.run_id in mark_forms else ""
        rows.append(
            f"<tr class=\"mg-run mg-run-{escape(r.status)}\"><td>{r.logical_date:%Y-%m-%d %H:%M}</td>"
            f"<td>{escape(r.role)}</td><td>{escape(r.status)}</td>{_counts_cells(r)}"
            f"<td><code>{escape(r.run_id)}</code></td><td>{_provenance(r)}</td><td>{action}</td></tr>"
        )
    header = "".join(f"<th>{s}</th>" for s in STATUSES)
    table = (
        "<table class=\"mg-runs\"><tr><th>logical date</th><th>role</th><th>status</th>"
        f"{header}<th>store run id</th><th>provenance</th><th></th></tr>" + "".join(rows) + "</table>"
    )
    nav = []
    if page_number > 1:
        nav.append(f"<a href=\"{escape(series_link(series, backend, suite, page=page_number - 1, **keep))}\">newer</a>")
    if has_next:
        nav.append(f"<a href=\"{escape(series_link(series, backend, suite, page=page_number + 1, **keep))}\">older</a>")
    runs_block = f"<h2>Runs (page {page_number})</h2>" + table + ("<p>" + " | ".join(nav) + "</p>" if nav else "")
    return page(f"Metric gate: {series}", head + overview + chart_block + runs_block)


@dataclass
class DeclarationView:
    """One failing declaration on the task-instance page: its summary, charts and worst results."""

    entry: dict
    charts: list[tuple[dict, str]] = field(default_factory=list)
    more: int = 0
    steps_chart: str = ""
    steps_note: str = ""
    series_href: str | None = None


def _results_table(results: Iterable[Mapping]) -> str:
    rows = []
    for r in results:
        band = "-" if r.get("lo") is None else f"[{_num(r['lo'])}, {_num(r['hi'])}]"
        decided = f"{r.get('side')}, {r.get('bound')}" if r["status"] == FAIL else (r.get("reason") or "")
        rows.append(
            f"<tr><td>{escape(r['status'])}</td><td>{escape(_step(r))}</td><td>{_num(r.get('current'))}</td>"
            f"<td>{_num(r.get('ref'))}</td><td>{escape(band)}</td><td>{r.get('n', '')}</td>"
            f"<td>{escape(decided)}</td></tr>"
        )
    return (
        "<table class=\"mg-results\"><tr><th>status</th><th>step</th><th>value</th><th>baseline</th><th>band</th>"
        "<th>n</th><th>decided by</th></tr>" + "".join(rows) + "</table>"
    )


def _key_of(entry: Mapping) -> tuple:
    return entry.get("metric_key"), entry.get("steps_key"), entry.get("constraint_key")


def trust_table(verdict: Mapping) -> str:
    """Return each declaration's own night: its outcome, whether it feeds its history, and why it is starved.

    The rows are the verdict's ``declarations`` (the calibrated policy's declarations) and, under
    every policy, its ``starved`` entries (a declaration without trusted history, and the cause).
    Empty when the verdict has neither (a reference verdict with no starved declaration).

    :param verdict: the verdict the task pushed to XCom.
    """
    nights = [d for d in verdict.get("declarations") or () if isinstance(d, Mapping)]
    starved = {_key_of(s): str(s.get("reason", "")) for s in verdict.get("starved") or () if isinstance(s, Mapping)}
    keys = [_key_of(d) for d in nights] + [k for k in starved if k not in {_key_of(d) for d in nights}]
    if not keys:
        return ""
    by_key = {_key_of(d): d for d in nights}
    rows = []
    for key in keys:
        d = by_key.get(key, {})
        if d:
            trusted = "yes" if d.get("trusted") else "no"
            z, q = d.get("z"), d.get("threshold")
            statistic = f"z {_num(z)} vs -+{_num(q)}" if isinstance(z, (int, float)) and isinstance(q, (int, float)) \
                else "-"
            level = d.get("level")
            level_text = f"{level * 100:+.1f} %" if isinstance(level, (int, float)) else "-"
            outcome, nights_text = str(d.get("outcome", "-")), str(d.get("nights", "-"))
            bridge = d.get("bridge")
            if isinstance(bridge, Mapping):  # a new level's few nights, filled up with the nights before it
                nights_text += f" (+{bridge.get('nights_before')} from before {str(bridge.get('since', ''))[:10]})"
        else:  # a reference declaration: the run's trust decides, only its starved reason is its own
            trusted, statistic, level_text, outcome, nights_text = "run's trust", "-", "-", "-", "0"
        reason = starved.get(key, "")
        css = " class=\"mg-starved\"" if reason else ""
        rows.append(
            f"<tr{css}><td>{escape(str(key[0]))} <span class=\"mg-muted\">(steps "
            f"{escape(steps_label(str(key[1] or '')))})</span></td><td>{escape(outcome)}</td>"
            f"<td class=\"mg-trust\">{escape(trusted)}</td><td>{escape(nights_text)}</td><td>{escape(statistic)}</td>"
            f"<td>{escape(level_text)}</td><td class=\"mg-starved-reason\">{escape(reason) or '-'}</td></tr>"
        )
    return (
        "<h2>Each declaration tonight</h2><p class=\"mg-muted\">Trust is per declaration: a night feeds the "
        "history of the declarations that passed on it, whatever the others did. A starved declaration has no "
        "trusted history although earlier nights exist; the reason names since when and why.</p>"
        "<table class=\"mg-declarations\"><tr><th>declaration</th><th>outcome</th><th>feeds its history</th>"
        "<th>trusted nights</th><th>night statistic</th><th>level</th><th>starved</th></tr>"
        + "".join(rows) + "</table>"
    )


def task_page(
    verdict: Mapping,
    declarations: Sequence[DeclarationView],
    *,
    summary_from_verdict: bool,
    series_href: str | None,
    mark: str = "",
    flash: str | None = None,
    accept: str = "",
) -> str:
    """The night's verdict of an evaluate task: summary first, then a chart per failing coordinate.

    :param verdict: the verdict the task pushed to XCom.
    :param declarations: the failing declarations, worst first.
    :param summary_from_verdict: whether the summary came from the verdict (else from its listed results).
    :param series_href: the relative link to the series page (``None`` when the series is not readable).
    :param mark: the mark form's HTML for this run (empty when not allowed).
    :param flash: a one-line note to show on top.
    :param accept: the "Accept this level" form (empty without a level shift, or when not allowed).
    """
    counts = verdict.get("counts", {})
    trusted = bool(verdict.get("trusted"))
    state = "TRUSTED" if trusted else "NOT TRUSTED"
    lines = []
    for view in declarations:
        css = "mg-error" if not view.entry["counts"].get(FAIL) else "mg-fail"
        lines.append(f"<li class=\"{css}\">{escape(summary_text(view.entry))}</li>")
    summary = (
        "<ul class=\"mg-summary\">" + "".join(lines) + "</ul>" if lines
        else "<p class=\"mg-summary-none\">Every coordinate is within its band (or has too little history).</p>"
    )
    if lines and not summary_from_verdict:
        summary += (
            "<p class=\"mg-muted\">Summary built from the results listed in the verdict"
            + (f" ({verdict.get('truncated')} more not listed)" if verdict.get("truncated") else "")
            + ".</p>"
        )
    head = (
        f"<h1>Metric gate verdict <span class=\"mg-verdict {'mg-verdict-ok' if trusted else 'mg-verdict-bad'}\">"
        f"{state}</span></h1>"
        f"<p>series <b>{escape(str(verdict.get('series')))}</b> ({escape(str(verdict.get('backend')))}, "
        f"{escape(str(verdict.get('suite')))}), role {escape(str(verdict.get('role')))}, logical date "
        f"{escape(str(verdict.get('logical_date')))}, store run <code>{escape(str(verdict.get('run_id')))}</code>"
        + (f" &middot; <a href=\"{escape(series_href)}\">all runs of this series</a>" if series_href else "")
        + "</p><p class=\"mg-counts\">"
        + ", ".join(f"{escape(str(counts.get(s, 0)))} {s}" for s in (PASS, FAIL, INACTIVE, ERROR))
        + (f"; {verdict.get('blocking')} enforced" if verdict.get("blocking") else "")
        + "</p>"
    )
    if flash:
        head += f"<p class=\"mg-flash\">{escape(flash)}</p>"
    if mark:
        head += f"<p>{mark}</p>"
    shifts = [x for x in verdict.get("level_shifts") or () if isinstance(x, Mapping)]
    items = "".join(
        f"<li>{escape(str(x.get('metric_key')))}: level shift since {escape(str(x.get('since')))}"
        + (" (adopted)" if x.get("adopted") else f", {escape(str(x.get('nights')))} night(s)") + "</li>"
        for x in shifts)
    items += "".join(
        f"<li>{escape(str(x.get('metric_key')))}: worse within the night from step {escape(str(x.get('from_step')))}"
        f" since {escape(str(x.get('since')))}</li>"
        for x in verdict.get("within_night") or () if isinstance(x, Mapping))
    items += "".join(
        f"<li>{escape(str(x.get('metric_key')))}: slow drift since {escape(str(x.get('start')))}"
        + (f", {x['cumulative'] * 100:+.1f} % in all" if isinstance(x.get("cumulative"), (int, float)) else "")
        + "</li>"
        for x in verdict.get("drifts") or () if isinstance(x, Mapping))
    if items:
        title = "Level shifts and drifts" if verdict.get("within_night") or verdict.get("drifts") else "Level shifts"
        head += f"<h2>{title}</h2><ul class=\"mg-shifts\">{items}</ul>" + (f"<p>{accept}</p>" if accept else "")
    body = [head, "<h2>What regressed</h2>", summary, trust_table(verdict)]
    warnings = [w for w in verdict.get("warnings", None) or () if isinstance(w, Mapping)]
    if warnings:
        items = "".join(f"<li>{escape(str(w.get('message', '')))}</li>" for w in warnings)
        body.append("<h2>Warnings</h2><p class=\"mg-muted\">Points of the record that no gate judged: "
                    "a value that is not a number is dropped, and a line no gate can name is not gated.</p>"
                    f"<ul class=\"mg-warnings\">{items}</ul>")
    for view in declarations:
        e = view.entry
        steps = escape(steps_label(e["steps_key"]))
        body.append(f"<h2>{escape(e['metric_key'])} <span class=\"mg-muted\">(steps {steps})</span></h2>")
        if view.steps_chart:
            body.append("<h3>This run over training steps, against the baseline band</h3>" + view.steps_chart)
            if view.steps_note:
                body.append(f"<p class=\"mg-muted\">{escape(view.steps_note)}</p>")
        for result, chart in view.charts:
            body.append(f"<h3>step {escape(_step(result))} over the last nights</h3>" + chart)
            if view.series_href:
                link = view.series_href + "&" + _q(step=result.get("step"), declaration=json.dumps(
                    [e["metric_key"], e["steps_key"], e["constraint_key"]]))
                body.append(f"<p><a class=\"mg-chart-link\" href=\"{escape(link)}\">this coordinate on the series "
                            "page</a></p>")
        if view.more:
            body.append(f"<p class=\"mg-muted\">{view.more} more failing coordinate(s) of this declaration; "
                        "chart any of them from the series page.</p>")
        if view.charts:
            body.append(_results_table([r for r, _ in view.charts]))
    errors = [r for r in verdict.get("results", []) if r.get("status") == ERROR]
    if errors:
        body.append("<h2>Errors</h2>" + _results_table(errors))
    return page("Metric gate verdict", "".join(body))

