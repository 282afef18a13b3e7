"""The forms of the "Metric gate" UI pages: mark a run trusted or untrusted, accept a series' new level.

Each posts to the plugin (``mark``, ``accept``) with a reason and the request token of this user and run.
"""

from __future__ import annotations

from dataclasses import dataclass
from html import escape

from airflow_metric_gate.store import RunRow


@dataclass
class MarkForm:
    """What a mark form needs: where to post back, and the request token of this user and run."""

    token: str
    next_url: str


def mark_target(run: RunRow) -> str:
    """The status a run's mark form sets: ``untrusted``, or ``trusted`` for a run that is untrusted.

    :param run: the run.
    """
    return "untrusted" if run.status != "untrusted" else "trusted"


def mark_form(run: RunRow, form: MarkForm) -> str:
    """Return the form that marks a run trusted or untrusted (reason required).

    :param run: the run.
    :param form: the token and the page to come back to.
    """
    target = mark_target(run)
    return (
        "<form class=\"mg-inline mg-mark\" method=\"post\" action=\"mark\">"
        f"<input type=\"hidden\" name=\"run_id\" value=\"{escape(run.run_id)}\">"
        f"<input type=\"hidden\" name=\"status\" value=\"{target}\">"
        f"<input type=\"hidden\" name=\"token\" value=\"{escape(form.token)}\">"
        f"<input type=\"hidden\" name=\"next\" value=\"{escape(form.next_url)}\">"
        "<input name=\"reason\" required minlength=\"3\" maxlength=\"500\" placeholder=\"reason\" size=\"18\">"
        f"<button type=\"submit\">mark {target}</button></form>"
    )


def accept_form(run: RunRow, since: str, form: MarkForm, change: str = "") -> str:
    """Return the "Accept this level" form of a run with a reported level shift (reason required).

    :param run: the night that reported the shift.
    :param since: the shift's first night (store run id).
    :param form: the token and the page to come back to.
    :param change: the shift's size, as shown on the button.
    """
    return (
        "<form class=\"mg-inline mg-accept\" method=\"post\" action=\"accept\">"
        f"<input type=\"hidden\" name=\"run_id\" value=\"{escape(run.run_id)}\">"
        f"<input type=\"hidden\" name=\"since\" value=\"{escape(since)}\">"
        f"<input type=\"hidden\" name=\"token\" value=\"{escape(form.token)}\">"
        f"<input type=\"hidden\" name=\"next\" value=\"{escape(form.next_url)}\">"
        "<input name=\"reason\" required minlength=\"3\" maxlength=\"500\" placeholder=\"why the new level is right\" "
        "size=\"28\">"
        f"<button type=\"submit\">Accept this level{escape(' (' + change + ')' if change else '')}</button></form>"
    )
