"""The verdict: what on-call reads in XCom, in ``--json`` output and in the task log (SPEC section 10)."""

from __future__ import annotations

import json
import shlex
import sys
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass

from airflow_metric_gate.evaluation import ERROR, FAIL, INACTIVE, PASS, STATUSES, Result
from airflow_metric_gate.printable import printable, printable_copy

VERDICT_SCHEMA = "airflow-metric-gate/verdict/v1"
DEFAULT_MAX_RESULTS = 200
#: The verdict pushed to XCom is kept below this many bytes of JSON (results are truncated with a count).
XCOM_MAX_BYTES = 60_000
#: The rendered table shows at most this many results per declaration, worst first.
DEFAULT_TABLE_ROWS = 5
#: A FAIL's distance divides by ``max(|ref|, DISTANCE_TINY)``, so a zero baseline still gives a number.
DISTANCE_TINY = 1e-12

#: A declaration: ``(metric_key, steps_key, constraint_key)``.
DeclarationKey = tuple[str, str, str]


def band_distance(current: float, ref: float, lo: float, hi: float) -> float:
    """Return how far a value lies outside its band, relative to the baseline (0.0 inside it).

    ``(current - hi) / max(|ref|, DISTANCE_TINY)`` above the band,
    ``(lo - current) / max(|ref|, DISTANCE_TINY)`` below it; capped at the largest float so it
    stays valid JSON.

    :param current: tonight's value.
    :param ref: the baseline reference.
    :param lo: the lower end of the band.
    :param hi: the upper end of the band.
    """
    scale = max(abs(ref), DISTANCE_TINY)
    if current > hi:
        distance = (current - hi) / scale
    elif current < lo:
        distance = (lo - current) / scale
    else:
        return 0.0
    return min(distance, sys.float_info.max)


class _Declaration:
    """What one declaration's results add up to, gathered in one pass."""

    __slots__ = ("key", "counts", "first", "last", "above", "below", "worst", "worst_distance", "error", "failing")

    def __init__(self, key: DeclarationKey) -> None:
        self.key = key
        self.counts = {status: 0 for status in STATUSES}
        self.first: int | None = None
        self.last: int | None = None
        self.above = self.below = self.failing = False
        self.worst: Result | None = None
        self.worst_distance = 0.0
        self.error: str | None = None

    def entry(self, counts: Mapping[str, int]) -> dict:
        worst = self.worst
        return {
            "metric_key": self.key[0], "steps_key": self.key[1], "constraint_key": self.key[2],
            "counts": {status: int(counts.get(status, 0)) for status in STATUSES},
            "first_failing_step": self.first, "last_failing_step": self.last,
            "side": ("both" if self.below else "above") if self.above else ("below" if self.below else None),
            "worst": None if worst is None else {
                "step": worst.step, "at_step": worst.at_step, "current": worst.current, "ref": worst.ref,
                "lo": worst.lo, "hi": worst.hi, "side": worst.side, "bound": worst.bound,
                "distance": self.worst_distance,
            },
            "error": self.error,
        }


def summarize(
    results: Sequence[Result],
    declaration_counts: Mapping[DeclarationKey, Mapping[str, int]] | None = None,
) -> tuple[list[dict], dict[int, float]]:
    """Return the verdict's ``summary`` and the distance of every FAIL (by index into ``results``).

    The summary has one entry per declaration with any FAIL or ERROR, worst first: the
    declarations with a FAIL by their worst distance (largest first; ties keep declaration
    order), then those with only ERRORs, in declaration order.  One pass, no per-result objects:
    it runs over every result of a run, 100,000 of them or more.

    :param results: every FAIL and ERROR result (and, without ``declaration_counts``, every result).
    :param declaration_counts: results per status of each declaration; by default counted from ``results``.
    """
    tiny, biggest = DISTANCE_TINY, sys.float_info.max
    counting = declaration_counts is None
    distances: dict[int, float] = {}
    gathered: dict[DeclarationKey, _Declaration] = {}
    d: _Declaration | None = None
    for i, r in enumerate(results):
        if d is None or d.key[0] != r.metric_key or d.key[1] != r.steps_key or d.key[2] != r.constraint_key:
            key = (r.metric_key, r.steps_key, r.constraint_key)
            d = gathered.get(key)
            if d is None:
                d = gathered[key] = _Declaration(key)
        status = r.status
        if counting:
            d.counts[status] += 1
        if status == FAIL:
            scale = abs(r.ref)  # type: ignore[arg-type]
            if scale < tiny:
                scale = tiny
            if r.side == "above":
                distance = (r.current - r.hi) / scale  # type: ignore[operator]
                d.above = True
            else:
                distance = (r.lo - r.current) / scale  # type: ignore[operator]
                d.below = True
            if distance > biggest:
                distance = biggest
            distances[i] = distance
            step = r.at_step if r.step == -1 else r.step
            if step is not None:
                if d.first is None or step < d.first:
                    d.first = step
                if d.last is None or step > d.last:
                    d.last = step
            if d.worst is None or distance > d.worst_distance:
                d.worst, d.worst_distance = r, distance
            d.failing = True
        elif status == ERROR:
            if d.error is None:
                d.error = r.reason
            d.failing = True
    found = {} if declaration_counts is None else declaration_counts
    entries = [d.entry(d.counts if counting else found.get(d.key, {})) for d in gathered.values() if d.failing]
    entries.sort(key=lambda e: (e["worst"] is None, -e["worst"]["distance"] if e["worst"] is not None else 0.0))
    return entries, distances


def _encoded_size(verdict: dict) -> int:
    # json.dumps defaults (", " and ": "): the larger of the usual encodings, so any consumer's copy fits.
    return len(json.dumps(verdict).encode())


def build_verdict(
    *,
    series: str,
    backend: str,
    suite: str,
    run_id: str,
    role: str,
    logical_date: str,
    results: Sequence[Result],
    trusted: bool,
    enforced: bool,
    blocking: int,
    all_results: bool = False,
    max_results: int | None = DEFAULT_MAX_RESULTS,
    max_bytes: int | None = None,
    extra_fields: Sequence[tuple[int, dict]] = (),
    counts: dict[str, int] | None = None,
    declaration_counts: Mapping[DeclarationKey, Mapping[str, int]] | None = None,
    warn_declarations: Collection[DeclarationKey] = (),
) -> dict:
    """Assemble the versioned verdict.

    :param series: series name.
    :param backend: hardware backend.
    :param suite: schedule or cluster.
    :param run_id: the store run id.
    :param role: ``baseline`` or ``shadow``.
    :param logical_date: ISO 8601 logical date of the run.
    :param results: every result in declaration then step order; or, with ``counts`` and
        ``declaration_counts``, at least every FAIL and ERROR result (the ``summary`` needs them all).
    :param trusted: whether the run is trusted.
    :param enforced: whether enforcement applied to this run (run-level or any declaration).
    :param blocking: how many FAIL/ERROR results are enforced (they fail the task / exit 1).
    :param all_results: list every result in declaration then step order; by default only the FAIL
        and ERROR results, worst first (FAILs by distance, largest first, then ERRORs).
    :param max_results: at most this many results (``None``: no limit); the rest are counted in ``truncated``.
    :param max_bytes: also keep the JSON encoding below this many bytes by truncating further.
    :param extra_fields: ``(index into results, fields)`` pairs merged into those results' dicts.
    :param counts: results per status, when ``results`` holds only some of them (the FAIL and ERROR
        results); by default counted from ``results``.
    :param declaration_counts: results per status of each declaration, keyed
        ``(metric_key, steps_key, constraint_key)``, for the ``summary``; by default counted from ``results``.
    :param warn_declarations: the declarations of ``severity: warn``: their summary entries and
        results say ``"severity": "warn"`` (reported as warnings, never blocking).
    """
    if counts is None:
        counts = {status: 0 for status in STATUSES}
        for r in results:
            counts[r.status] += 1
    extras = dict(extra_fields)
    summary, distances = summarize(results, declaration_counts)
    warned = set(warn_declarations)
    if warned:
        for entry in summary:
            if (entry["metric_key"], entry["steps_key"], entry["constraint_key"]) in warned:
                entry["severity"] = "warn"
        for i, r in enumerate(results):
            if (r.metric_key, r.steps_key, r.constraint_key) in warned:
                extras[i] = {**extras.get(i, {}), "severity": "warn"}
    if all_results:
        chosen = list(range(len(results)))
    else:
        fails = sorted(distances, key=distances.__getitem__, reverse=True)  # stable: ties keep their order
        errors = [i for i, r in enumerate(results) if r.status == ERROR]
        chosen = fails + errors
    kept = chosen if max_results is None else chosen[:max_results]
    verdict = {
        "schema": VERDICT_SCHEMA,
        "series": series,
        "backend": backend,
        "suite": suite,
        "run_id": run_id,
        "role": role,
        "logical_date": logical_date,
        "trusted": trusted,
        "enforced": enforced,
        "blocking": blocking,
        "counts": counts,
        "summary": summary,
        "results": [{**results[i].to_dict(), **extras.get(i, {})} for i in kept],
        "truncated": len(chosen) - len(kept),
    }
    if max_bytes is not None and _encoded_size(verdict) > max_bytes:
        full = verdict["results"]
        lo, hi = 0, len(full)
        while lo < hi:  # the largest prefix of results that fits
            mid = (lo + hi + 1) // 2
            verdict["results"] = full[:mid]
            if _encoded_size(verdict) <= max_bytes:
                lo = mid
            else:
                hi = mid - 1
        verdict["results"] = full[:lo]
        verdict["truncated"] = len(chosen) - lo
    return verdict


def summary_line(verdict: dict) -> str:
    """Return the one greppable line that sums a verdict up.

    ``metric-gate: <series> run <id>: TRUSTED|NOT-TRUSTED (<n> results, <f> fail, <e> error)``

    Control characters in names are escaped (:func:`~airflow_metric_gate.printable.printable`).
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


def _step(result: dict) -> str:
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


def _change(current: float, ref: float) -> str:
    """How far ``current`` is from ``ref``: in percent of ``|ref|``, or as a difference when ``ref`` is 0."""
    if abs(ref) < DISTANCE_TINY:
        return f"{current - ref:+.6g}"
    percent = (current - ref) / abs(ref) * 100
    return f"{percent:+.1f}%" if abs(percent) < 10 else f"{percent:+.0f}%"


_SIDES = {"above": "above band", "below": "below band", "both": "above and below band"}


def summary_entry_line(entry: Mapping) -> str:
    """Return one ``summary`` entry as the line that opens the report, e.g.::

        REGRESSED rollout/raw_reward (steps "all"): 80 of 120 steps FAIL, steps 120..199, below band,
        worst step 150: 0.41 vs baseline 0.8 (-49%; band 0.64..0.96)

    (one line), or ``ERROR <metric> (steps <steps>): <reason>`` for a declaration that could not select.
    A declaration of ``severity: warn`` opens with ``WARNING`` instead (``WARNING ERROR`` for an ERROR).

    :param entry: an entry of the verdict's ``summary``.
    """
    name = f"{entry['metric_key']} (steps {entry['steps_key']})"
    counts = entry["counts"]
    worst = entry["worst"]
    warn = "WARNING " if entry.get("severity") == "warn" else ""
    if worst is None:
        return printable(f"{warn}ERROR {name}: {entry['error']}")
    steps = counts[PASS] + counts[FAIL] + counts[INACTIVE]
    parts = [f"{counts[FAIL]} of {steps} {'step' if steps == 1 else 'steps'} FAIL"]
    first, last = entry["first_failing_step"], entry["last_failing_step"]
    if first is not None:
        parts.append(f"step {first}" if first == last else f"steps {first}..{last}")
    parts.append(_SIDES.get(entry["side"], f"{entry['side']} band"))
    at = worst["at_step"] if worst["at_step"] is not None else worst["step"]
    parts.append(
        f"worst step {'last' if at is None or at == -1 else at}: {_num(worst['current'])} vs baseline "
        f"{_num(worst['ref'])} ({_change(worst['current'], worst['ref'])}; "
        f"band {_num(worst['lo'])}..{_num(worst['hi'])})"
    )
    if counts[ERROR]:
        parts.append(f"{counts[ERROR]} ERROR: {entry['error']}")
    return printable(f"{warn or 'REGRESSED '}{name}: " + ", ".join(parts))


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
    """

    summary: tuple[str, ...]
    grep_line: str
    table: str
    where: tuple[str, ...] = ()

    def __str__(self) -> str:
        return "\n".join([*self.summary, self.grep_line, self.table, *self.where])


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
        summary=tuple(printable(summary_entry_line(entry)) for entry in verdict.get("summary", ())),
        grep_line=summary_line(verdict),
        table=render_table(verdict, table_rows=table_rows, fails=fails),
        where=tuple(where),
    )


def show_command(verdict: Mapping) -> str:
    """Return the command that prints every result of a verdict's stored run (read-only).

    :param verdict: a verdict from :func:`build_verdict`.
    """
    total = sum(verdict["counts"].values())
    more = f" --max-results {total}" if total > DEFAULT_MAX_RESULTS else ""
    return f"metric-gate show {shlex.quote(verdict['run_id'])} --all{more}"
