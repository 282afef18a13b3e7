"""The summary every replay report ends with, whichever way its nights were judged, and the report as text."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from airflow_metric_gate.enums import ERROR
from airflow_metric_gate.printable import printable_copy
from airflow_metric_gate.rules import rule_options

__all__ = ["render_replay", "replay_summary"]


def replay_summary(nights: Sequence[Mapping], judged: Sequence[Mapping], replayable: int,
                   counts: Mapping[str, int]) -> dict:
    """Return a replay report's ``summary``: what would fail, against what is stored, and what changed.

    :param nights: every night of the report.
    :param judged: the nights that were judged (``replayed_status`` not ``None``).
    :param replayable: how many declarations could be replayed.
    :param counts: results per status over every judged night.
    """
    return {
        "nights": len(nights),
        "replayable_declarations": replayable,
        "would_fail": sum(n["replayed_status"] != "trusted" for n in judged),
        "stored_untrusted": sum(n["stored_status"] == "untrusted" for n in nights),
        "newly_failing": [n["run_id"] for n in judged
                          if n["stored_status"] == "trusted" and n["replayed_status"] != "trusted"],
        "no_longer_failing": [n["run_id"] for n in judged
                              if n["stored_status"] == "untrusted" and n["replayed_status"] == "trusted"],
        "counts": {s: c for s, c in counts.items() if c},
    }


def _step(result: dict) -> str:
    if result["step"] is None:
        return "-"
    return f"last@{result['at_step']}" if result["step"] == -1 else str(result["step"])


def _describe(result: dict) -> str:
    if result["status"] == ERROR:
        return f"ERROR: {result['reason']}"
    if result["step"] is None or result["lo"] is None or result["current"] is None:  # a whole night's result
        return f"{result['status']} whole night: {result['reason']}"
    band = f"[{result['lo']:.6g}, {result['hi']:.6g}]"
    return f"{result['status']} step {_step(result)} {result['current']:.6g} vs {band}"


def render_replay(report: dict, *, max_coordinates: int = 5) -> str:
    """Return a replay report as text: per declaration its failing nights, then what changed.

    Control characters in stored names (series, metric keys, steps and constraint literals, run
    ids, reasons) are escaped (:func:`~airflow_metric_gate.printable.printable`), as in every report
    of the package: a stored key cannot start a line of its own.

    :param report: from :func:`airflow_metric_gate.replay.replay`.
    :param max_coordinates: at most this many coordinates listed per night and declaration.
    """
    report = printable_copy(report)
    st = report["settings"]
    lines = [
        f"replay of series {report['series']} (backend {report['backend']}, suite {report['suite']}): "
        f"{report['summary']['nights']} night(s); declarations {st['declarations']}, history_limit "
        f"{st['history_limit']}, min_history {st['min_history']}, aggregate {st['aggregate']}, trust {st['trust']}",
    ]
    lines.extend(f"warning: {w}" for w in report.get("warnings", ()))
    for g in report["declarations"]:
        lines.append("")
        options = "".join(f" {k}={v:g}" if isinstance(v, float) else f" {k}={v}" for k, v in rule_options(g).items())
        lines.append(f"{g['metric_key']} steps={g['steps_key']} constraint={g['constraint_key']}{options}: "
                     f"{g['nights_failed']} of {g['nights_judged']} night(s) would fail"
                     + (f"; not stored on {g['nights_not_stored']} night(s)" if g.get("nights_not_stored") else ""))
        for f in g["failed"]:
            coords = ", ".join(_describe(r) for r in f["results"][:max_coordinates])
            more = len(f["results"]) - max_coordinates
            lines.append(f"  {f['logical_date']} {f['run_id']} (stored {f['stored_status']}): {coords}"
                         + (f" and {more} more" if more > 0 else ""))
    for g in report["not_replayable"]:
        lines.append("")
        lines.append(f"{g['metric_key']} steps={g['steps_key']}: not replayable: {g['reason']}")
    s = report["summary"]
    lines.append("")
    if st["declarations"] == "given" and not s.get("replayable_declarations", 1):
        lines.append(f"no declaration replayable: none of the {s['nights']} night(s) was judged "
                     f"(stored: {s['stored_untrusted']} untrusted)")
        return "\n".join(lines)
    lines.append(f"{s['would_fail']} of {s['nights']} night(s) would fail (stored: {s['stored_untrusted']} untrusted)")
    lines.append(f"newly failing (stored trusted): {', '.join(s['newly_failing']) or 'none'}")
    lines.append(f"no longer failing (stored untrusted): {', '.join(s['no_longer_failing']) or 'none'}")
    return "\n".join(lines)
