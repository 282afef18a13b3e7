"""Rendering a verdict for reading: the summary lines, the greppable line and the capped table.

The one rendering of a verdict, shared by the task log, ``metric-gate run``/``show``, the Python
API and the demo.  Building the verdict is :mod:`airflow_metric_gate.verdict`.
"""

from __future__ import annotations

import json
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from airflow_metric_gate.enums import ERROR, FAIL, INACTIVE, PASS, STATUSES
from airflow_metric_gate.printable import printable, printable_copy
from airflow_metric_gate.verdict import DEFAULT_MAX_RESULTS, DISTANCE_TINY, DeclarationKey, band_distance

__all__ = [
    "DEFAULT_TABLE_ROWS",
    "Report",
    "change_text",
    "format_columns",
    "render_report",
    "render_table",
    "show_command",
    "notice_lines",
    "summary_entry_line",
    "summary_line",
    "warning_lines",
]

#: The rendered table shows at most this many results per declaration, worst first.
DEFAULT_TABLE_ROWS = 5


def summary_line(verdict: Mapping[str, Any]) -> str:
    """Return the one greppable line that sums a verdict up.

    ``metric-gate: <series> run <id>: TRUSTED|NOT-TRUSTED (<n> results, <f> fail, <e> error)``

    Control characters in names are escaped (:func:`~airflow_metric_gate.printable.printable`).

    :param verdict: the verdict.
    """
    verdict = printable_copy(verdict)
    counts = verdict["counts"]
    total = sum(counts.values())
    state = "TRUSTED" if verdict["trusted"] else "NOT-TRUSTED"
    return (
        f"metric-gate: {verdict['series']} run {verdict['run_id']}: {state} "
        f"({total} results, {counts[FAIL]} fail, {counts[ERROR]} error)"
    )


def _num(x: float | None) -> str:
    return "-" if x is None else f"{x:.6g}"


def _step(result: Mapping[str, Any]) -> str:
    if result["step"] is None:
        return "-"
    if result["step"] == -1:
        return f"last@{result['at_step']}" if result.get("at_step") is not None else "last"
    return str(result["step"])


def format_columns(header: Sequence[str], rows: Sequence[Sequence[str]]) -> list[str]:
    """Return a header and rows as left-aligned columns two spaces apart (the last column unpadded).

    :param header: the column titles.
    :param rows: the cells, as strings.
    """
    widths = [max(len(h), *(len(row[i]) for row in rows)) for i, h in enumerate(header[:-1])]
    return ["  ".join([*(c.ljust(w) for c, w in zip(row, widths)), row[-1]]).rstrip() for row in (header, *rows)]


def change_text(current: float, ref: float) -> str:
    """Return the "by how much" of a failing value: its change against the baseline (the measure every view names).

    In percent of ``|ref|`` (``-43%``), or as a difference when ``ref`` is 0 (``+0.3``).

    :param current: the value.
    :param ref: the baseline reference.
    """
    return _change(current, ref)


def _change(current: float, ref: float) -> str:
    """How far ``current`` is from ``ref``: in percent of ``|ref|``, or as a difference when ``ref`` is 0."""
    if abs(ref) < DISTANCE_TINY:
        return f"{current - ref:+.6g}"
    percent = (current - ref) / abs(ref) * 100
    return f"{percent:+.1f}%" if abs(percent) < 10 else f"{percent:+.0f}%"


_SIDES = {"above": "above band", "below": "below band", "both": "above and below band"}


def _failing_steps(steps_key: str, first: int, last: int, failing: int) -> str:
    """The failing steps of a declaration: ``steps 120..199`` spans a range, a steps list reads as a list.

    Under a steps list, ``steps [500, 1000]`` when every listed step from the first to the last
    failing one failed, else the span with the list it is part of.

    :param steps_key: the declaration's steps key (``"all"``, ``[500,1000]``, ...).
    :param first: the smallest failing step.
    :param last: the largest failing step.
    :param failing: how many steps failed.
    """
    if first == last:
        return f"step {first}"
    listed = json.loads(steps_key) if steps_key.startswith("[") else None
    if not isinstance(listed, list):
        return f"steps {first}..{last}"
    span = sorted(step for step in listed if isinstance(step, int) and first <= step <= last)
    if len(span) == failing:
        return f"steps [{', '.join(map(str, span))}]"
    return f"{failing} of the listed steps from {first} to {last}"


def summary_entry_line(entry: Mapping) -> str:
    """Return one ``summary`` entry as the line that opens the report, e.g.::

        REGRESSED rollout/raw_reward (steps "all"): 80 of 120 steps FAIL, steps 120..199, below band,
        worst step 150: 0.41 vs baseline 0.8 (change -49%; band 0.64..0.96)

    (one line), or ``ERROR <metric> (steps <steps>): <reason>`` for a declaration that could not select.
    A declaration of ``severity: warn`` opens with ``WARNING`` instead (``WARNING ERROR`` for an ERROR).

    :param entry: an entry of the verdict's ``summary``.
    """
    name = f"{entry['metric_key']} (steps {entry['steps_key']})"
    counts = entry["counts"]
    worst = entry["worst"]
    warn = "WARNING " if entry.get("severity") == "warn" else ""
    night = entry.get("night")  # the whole night's FAIL (opt-in night_mean_k): one result, not a step
    calibrated = entry.get("calibrated_night")  # the calibrated policy's failing night: one result, not a step
    if worst is None and night is None and calibrated is None:
        return printable(f"{warn}ERROR {name}: {entry['error']}")
    whole = 1 if night is not None or calibrated is not None else 0
    steps = counts[PASS] + counts[FAIL] + counts[INACTIVE] - whole
    parts = [f"{counts[FAIL] - whole} of {steps} {'step' if steps == 1 else 'steps'} FAIL"]
    first, last = entry["first_failing_step"], entry["last_failing_step"]
    if first is not None:
        parts.append(_failing_steps(entry["steps_key"], first, last, counts[FAIL] - whole))
    parts.append(_SIDES.get(entry["side"], f"{entry['side']} band"))
    if worst is not None:
        at = worst["at_step"] if worst["at_step"] is not None else worst["step"]
        parts.append(
            f"worst step {'last' if at is None or at == -1 else at}: {_num(worst['current'])} vs baseline "
            f"{_num(worst['ref'])} (change {_change(worst['current'], worst['ref'])}; "
            f"band {_num(worst['lo'])}..{_num(worst['hi'])})"
        )
    if night is not None:
        parts.append(
            f"whole night {night['side']} its band: robust z of {night['steps']} steps, summed / sqrt(n), "
            f"{_num(night['statistic'])} vs -+{_num(night['night_mean_k'])} (night_mean_k)"
        )
    if calibrated is not None:
        parts.append(calibrated["reason"])
    if counts[ERROR]:
        parts.append(f"{counts[ERROR]} ERROR: {entry['error']}")
    return printable(f"{warn or 'REGRESSED '}{name}: " + ", ".join(parts))


def _pct(x: float) -> str:
    return f"{x * 100:+.1f} %"


def _accept_text(what: str, where: str, since_run_id: object) -> str:
    """The accept command offered beside a drift or a within-night change (none without the night it began)."""
    if not since_run_id:
        return ""
    return f". If {what} is right: metric-gate accept {where} --since {shlex.quote(str(since_run_id))} --reason '...'"


def notice_lines(verdict: Mapping) -> tuple[str, ...]:
    """The lines that tell on-call what the calibrated policy found beyond FAILs, and starved baselines.

    ``LEVEL SHIFT``, ``DRIFT``, ``IMPROVED``, ``BLOW-UP`` and ``STARVED`` lines, one per entry of the
    verdict's sections (:func:`~airflow_metric_gate.verdict.calibrated_sections`), each saying what to
    do; shown after the summary lines wherever a verdict is rendered.

    :param verdict: a verdict.
    """
    where = (f"--series {shlex.quote(str(verdict.get('series')))} --backend {shlex.quote(str(verdict.get('backend')))} "
             f"--suite {shlex.quote(str(verdict.get('suite')))}")
    lines = []
    for shift in verdict.get("level_shifts", ()) or ():
        name = f"{shift['metric_key']} (steps {shift['steps_key']})"
        if shift.get("adopted"):
            lines.append(f"LEVEL SHIFT {name} since {shift['since']} adopted as the baseline after {shift['nights']} "
                         "night(s) without accept")
            continue
        state = (f"night {shift['nights']}, reported on its first night, not paging again"
                 if shift.get("continues") else "new tonight")
        lines.append(f"LEVEL SHIFT {name} since {shift['since']}: {_pct(shift['change'])} ({state}; adopted after "
                     f"{shift['adopt_after']} nights). If the new level is right: metric-gate accept {where} --since "
                     f"{shlex.quote(shift['since_run_id'])} --reason '...'")
    for drift in verdict.get("drifts", ()) or ():
        lines.append(f"DRIFT {drift['metric_key']} (steps {drift['steps_key']}) since {drift['start']}: "
                     f"{drift['slope'] * 100:+.2f} % a night, {_pct(drift['cumulative'])} in all"
                     + (" (continues)" if drift.get("continues") else "")
                     + _accept_text("the level it reached", where, drift.get("since_run_id")))
    for worse in verdict.get("within_night", ()) or ():
        lines.append(f"WORSE WITHIN THE NIGHT {worse['metric_key']} (steps {worse['steps_key']}): from step "
                     f"{worse['from_step']} on, against the steps before it"
                     + (f" (since {worse['since']}, continues)" if worse.get("continues") else "")
                     + _accept_text("the new shape", where, worse.get("since_run_id")))
    for better in verdict.get("improvements", ()) or ():
        lines.append(f"IMPROVED {better['metric_key']} (steps {better['steps_key']}): {_pct(better['level'])} "
                     "beyond its band on the good side; not a regression")
    for blown in verdict.get("blowups", ()) or ():
        lines.append(f"BLOW-UP {blown['metric_key']} (steps {blown['steps_key']}): {blown['count']} step(s) 5x or "
                     "more beyond anything their earlier nights had"
                     + (f" (since {blown['since']}, night {blown['nights']}, continues)" if blown.get("continues")
                        else ""))
    for starved in verdict.get("starved", ()) or ():
        lines.append(f"STARVED {starved['metric_key']} (steps {starved['steps_key']}): {starved['reason']}")
    return tuple(printable(line) for line in lines)


def _result_distance(result: Mapping) -> float:
    if result["status"] != FAIL or None in (result["current"], result["ref"], result["lo"], result["hi"]):
        return 0.0
    return band_distance(result["current"], result["ref"], result["lo"], result["hi"])


_ORDER = {FAIL: 0, ERROR: 1, INACTIVE: 2, PASS: 3}


def _worst_first(result: Mapping) -> tuple[int, float]:
    return (_ORDER[result["status"]], -_result_distance(result))


def _row(r: Mapping) -> tuple[str, ...]:
    band = "-" if r["lo"] is None else f"[{_num(r['lo'])}, {_num(r['hi'])}]"
    if r["status"] == FAIL:
        decided = f"{r['side']}, {r['bound']}"
    elif r["status"] == ERROR:
        decided = r["reason"]
    elif r["status"] == INACTIVE:
        decided = "cold start"
    else:
        decided = ""
    if r.get("allowlist_reason"):
        decided += f" (allowlisted: {r['allowlist_reason']})"
    if r.get("severity") == "warn" and r["status"] in (FAIL, ERROR):
        decided += " (warning: severity warn, never blocks)"
    return (r["status"], r["metric_key"], _step(r), _num(r["current"]), _num(r["ref"]), band, str(r["n"]), decided)


def render_table(verdict: dict, *, table_rows: int | None = DEFAULT_TABLE_ROWS, fails: bool = True) -> str:
    """Render a verdict's results as the table an on-call engineer scans, capped per declaration.

    Declarations come in ``summary`` order (worst first), then any other listed declaration; within
    one, at most ``table_rows`` results, worst first (FAILs by distance, then ERROR, INACTIVE,
    PASS), followed by a ``... N more result(s) of <metric> not shown`` line when some are left out.

    Control characters in keys, names and reasons are escaped
    (:func:`~airflow_metric_gate.printable.printable`): a key cannot start a line of its own.

    :param verdict: a verdict from :func:`build_verdict`.
    :param table_rows: at most this many rows per declaration; ``None`` or 0: no limit.
    :param fails: whether enforced FAIL/ERROR results fail this run where it is rendered
        (``False`` for a shadow run in Airflow, which reports them only).
    """
    verdict = printable_copy(verdict)
    head = (
        f"metric-gate verdict for series {verdict['series']} ({verdict['backend']}, {verdict['suite']}), "
        f"run {verdict['run_id']}, role {verdict['role']}, logical date {verdict['logical_date']}"
    )
    failing: dict[DeclarationKey, int] = {}  # FAIL and ERROR results of each summarized declaration
    groups: dict[DeclarationKey, list[dict]] = {}
    for entry in verdict.get("summary", ()):
        key = (entry["metric_key"], entry["steps_key"], entry["constraint_key"])
        failing[key] = entry["counts"][FAIL] + entry["counts"][ERROR]
        groups[key] = []
    for r in verdict["results"]:
        groups.setdefault((r["metric_key"], r["steps_key"], r["constraint_key"]), []).append(r)
    rows: list[tuple[str, ...]] = []
    sections: list[tuple[int, str | None]] = []  # per declaration: rows shown, then its "more" line
    for key, listed in groups.items():
        listed.sort(key=_worst_first)
        shown = listed[:table_rows] if table_rows else listed
        shown_failing = sum(1 for r in shown if r["status"] in (FAIL, ERROR))
        listed_failing = sum(1 for r in listed if r["status"] in (FAIL, ERROR))
        hidden = failing.get(key, listed_failing) - shown_failing + (len(listed) - listed_failing) - (
            len(shown) - shown_failing
        )
        rows.extend(_row(r) for r in shown)
        sections.append((len(shown), f"... {hidden} more result(s) of {key[0]} not shown" if hidden > 0 else None))
    header = ("STATUS", "METRIC", "STEP", "VALUE", "BASELINE", "BAND", "N", "DECIDED BY")
    lines = [head]
    if rows:
        formatted = format_columns(header, rows)
        lines.append(formatted[0])
        at = 1
        for shown_count, more in sections:
            lines.extend(formatted[at:at + shown_count])
            at += shown_count
            if more:
                lines.append(more)
    elif sections:
        lines.extend(more for _, more in sections if more)
    else:
        lines.append("no FAIL or ERROR results")
    counts = verdict["counts"]
    lines.append("counts: " + ", ".join(f"{s} {counts[s]}" for s in STATUSES))
    warnings = sum(e["counts"][FAIL] + e["counts"][ERROR] for e in verdict.get("summary", ())
                   if e.get("severity") == "warn")
    if warnings:
        lines.append(f"{warnings} FAIL/ERROR result(s) of severity warn declarations: warnings, never blocking")
    if verdict["truncated"]:
        lines.append(f"{verdict['truncated']} result(s) left out of the verdict itself (max_results, size limit)")
    if verdict.get("blocking") and fails:
        lines.append(f"{verdict['blocking']} enforced FAIL/ERROR result(s): this run fails the gate")
    elif verdict.get("blocking"):
        lines.append(f"{verdict['blocking']} enforced FAIL/ERROR result(s), reported only: a shadow run does not fail")
    return "\n".join(lines)


@dataclass(frozen=True)
class Report:
    """A verdict rendered for reading, in the order it is shown (task log, CLI, demo).

    :param summary: one line per declaration with a FAIL or ERROR, worst first.
    :param grep_line: the greppable line (:func:`summary_line`).
    :param table: the capped table (:func:`render_table`), several lines.
    :param where: where the full verdict is.
    :param warnings: one line per warning of the verdict (points dropped from the record, lines
        no gate can read), each naming file and line.
    """

    summary: tuple[str, ...]
    grep_line: str
    table: str
    where: tuple[str, ...] = ()
    warnings: tuple[str, ...] = ()

    def __str__(self) -> str:
        return "\n".join([*self.summary, *self.warnings, self.grep_line, self.table, *self.where])


def render_report(
    verdict: dict, *, table_rows: int | None = DEFAULT_TABLE_ROWS, fails: bool = True, where: Sequence[str] = ()
) -> Report:
    """Render a verdict: the summary lines, the greppable line, the capped table, then ``where``.

    The one rendering of a verdict, shared by the task log, ``metric-gate run``/``show`` and the demo.

    :param verdict: a verdict from :func:`build_verdict`.
    :param table_rows: at most this many table rows per declaration; ``None`` or 0: no limit.
    :param fails: whether enforced FAIL/ERROR results fail this run where it is rendered
        (``False`` for a shadow run in Airflow).
    :param where: lines saying where the full verdict is.
    """
    return Report(
        summary=tuple(printable(summary_entry_line(entry)) for entry in verdict.get("summary", ()))
        + notice_lines(verdict),
        grep_line=summary_line(verdict),
        table=render_table(verdict, table_rows=table_rows, fails=fails),
        where=tuple(where),
        warnings=warning_lines(verdict),
    )


def warning_lines(verdict: Mapping) -> tuple[str, ...]:
    """One ``warning: ...`` line per entry of the verdict's ``warnings`` (control characters escaped).

    :param verdict: a verdict.
    """
    return tuple(printable(f"warning: {w.get('message', '')}") for w in verdict.get("warnings", ()) or ())


def show_command(verdict: Mapping) -> str:
    """Return the command that prints every result of a verdict's stored run (read-only).

    :param verdict: a verdict from :func:`build_verdict`.
    """
    total = sum(verdict["counts"].values())
    more = f" --max-results {total}" if total > DEFAULT_MAX_RESULTS else ""
    return f"metric-gate show {shlex.quote(verdict['run_id'])} --all{more}"
