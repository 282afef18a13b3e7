"""The verdict: what on-call reads in XCom, in ``--json`` output and in the task log (SPEC section 10)."""

from __future__ import annotations

import json
from collections.abc import Sequence

from airflow_metric_gate.evaluation import ERROR, FAIL, INACTIVE, PASS, STATUSES, Result
from airflow_metric_gate.printable import printable_copy

VERDICT_SCHEMA = "airflow-metric-gate/verdict/v1"
DEFAULT_MAX_RESULTS = 200
#: The verdict pushed to XCom is kept below this many bytes of JSON (results are truncated with a count).
XCOM_MAX_BYTES = 60_000


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
) -> dict:
    """Assemble the versioned verdict.

    :param series: series name.
    :param backend: hardware backend.
    :param suite: schedule or cluster.
    :param run_id: the store run id.
    :param role: ``baseline`` or ``shadow``.
    :param logical_date: ISO 8601 logical date of the run.
    :param results: every result, in declaration then step order.
    :param trusted: whether the run is trusted.
    :param enforced: whether enforcement applied to this run (run-level or any declaration).
    :param blocking: how many FAIL/ERROR results are enforced (they fail the task / exit 1).
    :param all_results: list every result in declaration then step order, not only FAIL/ERROR.
    :param max_results: at most this many results (``None``: no limit); the rest are counted in ``truncated``.
    :param max_bytes: also keep the JSON encoding below this many bytes by truncating further.
    :param extra_fields: ``(index into results, fields)`` pairs merged into those results' dicts.
    :param counts: results per status, when ``results`` holds only some of them (the FAIL and ERROR
        results); by default counted from ``results``.
    """
    if counts is None:
        counts = {status: 0 for status in STATUSES}
        for r in results:
            counts[r.status] += 1
    extras = dict(extra_fields)
    if all_results:
        chosen = list(range(len(results)))
    else:
        fails = [i for i, r in enumerate(results) if r.status == FAIL]
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


def render_table(verdict: dict) -> str:
    """Render a verdict as the table an on-call engineer scans: failures and errors first.

    Control characters in keys, names and reasons are escaped
    (:func:`~airflow_metric_gate.printable.printable`): a key cannot start a line of its own.

    :param verdict: a verdict from :func:`build_verdict`.
    """
    verdict = printable_copy(verdict)
    head = (
        f"metric-gate verdict for series {verdict['series']} ({verdict['backend']}, {verdict['suite']}), "
        f"run {verdict['run_id']}, role {verdict['role']}, logical date {verdict['logical_date']}"
    )
    order = {FAIL: 0, ERROR: 1, INACTIVE: 2, PASS: 3}
    results = sorted(verdict["results"], key=lambda r: order[r["status"]])
    header = ("STATUS", "METRIC", "STEP", "VALUE", "BASELINE", "BAND", "N", "DECIDED BY")
    rows = []
    for r in results:
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
        rows.append(
            (r["status"], r["metric_key"], _step(r), _num(r["current"]), _num(r["ref"]), band, str(r["n"]), decided)
        )
    lines = [head]
    if rows:
        lines.extend(format_columns(header, rows))
    else:
        lines.append("no FAIL or ERROR results")
    counts = verdict["counts"]
    lines.append("counts: " + ", ".join(f"{s} {counts[s]}" for s in STATUSES))
    if verdict["truncated"]:
        lines.append(f"... {verdict['truncated']} more result(s) not shown (see the full verdict)")
    if verdict.get("blocking"):
        lines.append(f"{verdict['blocking']} enforced FAIL/ERROR result(s): this run fails the gate")
    lines.append(summary_line(verdict))
    return "\n".join(lines)
