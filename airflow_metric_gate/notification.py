"""What a notification about a night says: the verdict's summary for whoever must act (no Airflow).

The notifiers of :mod:`airflow_metric_gate.notifications` (Slack, email) send the text this module
builds; so does anything else that wants to tell on-call about a night.  Every line comes from the
verdict itself (the same "REGRESSED ..." lines as the task log), so the message and the log agree.
Nothing secret is in a verdict, so nothing secret is in a notice.
"""

from __future__ import annotations

import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from airflow_metric_gate.decision.policy import reports_only
from airflow_metric_gate.printable import printable
from airflow_metric_gate.report import summary_entry_line, summary_line

__all__ = ["MAX_LINES", "Notice", "build_notice", "needs_attention"]

#: At most this many "REGRESSED ..." lines in one notice (the rest are counted; the tab has them all).
MAX_LINES = 10


@dataclass(frozen=True)
class Notice:
    """A notification about one night.

    :param subject: one line: the state of the night, the series and the run.
    :param lines: the body, line by line: what regressed, the counts, level shifts and drift, who
        must act and what to do, and the link to the Metric gate tab.
    :param link: the Metric gate tab of the task instance (``None`` when unknown).
    :param severity: ``failure`` (the gate blocked or the task failed) or ``warning``.
    """

    subject: str
    lines: tuple[str, ...]
    link: str | None
    severity: str

    @property
    def text(self) -> str:
        """The subject and the body as plain text, one line each."""
        return "\n".join([self.subject, "", *self.lines])


def _pct(fraction: object) -> str:
    if not isinstance(fraction, (int, float)):
        return "?"
    return f"{fraction * 100:+.1f} %"


def _name(item: Mapping) -> str:
    return f"{item.get('metric_key')} (steps {item.get('steps_key')})"


def shift_lines(verdict: Mapping) -> list[str]:
    """One line per level shift of the verdict (calibrated policy), with the command that accepts it.

    :param verdict: a verdict.
    """
    out = []
    for s in verdict.get("level_shifts") or ():
        if s.get("adopted"):
            out.append(f"LEVEL SHIFT {_name(s)}: adopted as the new baseline since {s.get('since')}")
            continue
        state = "continues" if s.get("continues") else "new"
        out.append(
            f"LEVEL SHIFT {_name(s)} ({state}): {_pct(s.get('change'))} since {s.get('since')} "
            f"(store run {s.get('since_run_id')}), {s.get('nights')} night(s)"
        )
    return out


def drift_lines(verdict: Mapping) -> list[str]:
    """One line per slow drift of the verdict (calibrated policy).

    :param verdict: a verdict.
    """
    return [
        f"DRIFT {_name(d)}: {_pct(d.get('cumulative'))} since {d.get('start')} "
        f"({_pct(d.get('slope'))} a night, {d.get('side')})"
        for d in verdict.get("drifts") or ()
    ]


def needs_attention(verdict: Mapping | None) -> bool:
    """Whether a night that passed its task still deserves a notice (a warning).

    True for a baseline night that is not trusted (not enforced), a ``severity: warn`` result, a
    level shift or a drift.  A trusted night without any of them, and a shadow run, are quiet.

    :param verdict: the verdict the evaluate task pushed (``None``: nothing to say).
    """
    if not isinstance(verdict, Mapping) or reports_only(verdict):
        return False
    if not verdict.get("trusted", True):
        return True
    if any(entry.get("severity") == "warn" for entry in verdict.get("summary") or ()):
        return True
    return bool(verdict.get("level_shifts") or verdict.get("drifts"))


def _accept_command(verdict: Mapping, shift: Mapping) -> str:
    parts = ["metric-gate", "accept", "--series", str(verdict.get("series"))]
    if verdict.get("backend") not in (None, "cuda"):
        parts += ["--backend", str(verdict["backend"])]
    if verdict.get("suite") not in (None, "default"):
        parts += ["--suite", str(verdict["suite"])]
    since = str(shift.get("since_run_id") or shift.get("since"))
    parts += ["--since", since, "--reason", "<why the new level is right>"]
    return " ".join(shlex.quote(p) if not p.startswith("<") else p for p in parts)


def _actions(verdict: Mapping | None, failed: bool) -> list[str]:
    if verdict is None:
        return ["Read the task log: the gate could not judge this night (no verdict was pushed)."]
    out = []
    shifts = [s for s in verdict.get("level_shifts") or () if not s.get("adopted")]
    if verdict.get("blocking") or failed:
        out.append("Open the Metric gate tab: each regressed metric has its chart at the step that failed.")
        out.append("A real regression: fix it, then clear the task. A broken night: metric-gate mark-untrusted "
                   f"--run-id {shlex.quote(str(verdict.get('run_id')))}.")
    if shifts:
        out.append("A change meant to be (a new level): accept it with " + _accept_command(verdict, shifts[0])
                   + " (or the \"Accept this level\" action of the Metric gate tab).")
    if verdict.get("drifts"):
        out.append("A slow drift passes each night's band: compare the nights in the series overview.")
    if not out:
        out.append("Nothing blocks: read the warnings in the Metric gate tab.")
    return out


def build_notice(
    verdict: Mapping | None,
    *,
    dag_id: str,
    task_id: str,
    run_id: str,
    link: str | None,
    failed: bool,
    who: Sequence[str] = (),
    error: str | None = None,
    max_lines: int = MAX_LINES,
) -> Notice:
    """Build the notice of one evaluate task instance from the verdict it pushed.

    :param verdict: the verdict (``None`` when the task failed before pushing one).
    :param dag_id: the DAG.
    :param task_id: the evaluate task.
    :param run_id: the DAG run.
    :param link: the Metric gate tab of the task instance.
    :param failed: whether the task failed (a failure notice), else a warning.
    :param who: who must act (on-call, the task's owners); named in the notice.
    :param error: the task's error, when it failed (shown without anything secret: the operators'
        messages never carry one).
    :param max_lines: at most this many "REGRESSED ..." lines (the rest are counted).
    """
    severity = "failure" if failed else "warning"
    where = f"{dag_id} / {run_id} / {task_id}"
    lines: list[str] = []
    if verdict is None:
        subject = f"metric-gate: task failed before a verdict: {where}"
        if error:
            lines.append(f"Error: {error}")
    else:
        state = "BLOCKED" if failed else "WARNING"
        subject = (f"metric-gate {state}: {verdict.get('series')} ({verdict.get('backend')}, {verdict.get('suite')}) "
                   f"night {str(verdict.get('logical_date', ''))[:10]}")
        summary = [summary_entry_line(e) for e in verdict.get("summary") or ()]
        lines.extend(summary[:max_lines])
        if len(summary) > max_lines:
            lines.append(f"... and {len(summary) - max_lines} more declaration(s) (see the Metric gate tab)")
        lines.extend(shift_lines(verdict))
        lines.extend(drift_lines(verdict))
        lines.append(summary_line(verdict) + (f", {verdict['blocking']} blocking" if verdict.get("blocking") else ""))
        lines.append(f"Task: {where}")
    names = [w for w in who if w]
    lines.append("Who must act: " + (", ".join(names) if names else "the on-call engineer of this DAG"))
    lines.extend(f"To do: {a}" for a in _actions(verdict, failed))
    if link:
        lines.append(f"Metric gate tab: {link}")
    return Notice(subject=printable(subject), lines=tuple(printable(line) for line in lines), link=link,
                  severity=severity)
