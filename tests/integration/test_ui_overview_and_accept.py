"""The series overview, opening on what regressed, marks from the command line, and "Accept this level".

The app runs in-process on a filled SQLite store (five good nights and a regressed one, ``n5``),
behind the same authorisation seam as the other UI tests.
"""

from __future__ import annotations

import re
from html import unescape
from urllib.parse import urlencode

import pytest
from _ui_app import SERIES, as_user, ui_client

from airflow_metric_gate.cli import main
from airflow_metric_gate.plugins import app as app_module
from airflow_metric_gate.plugins.metadata import TaskVerdict
from airflow_metric_gate.store import open_store

SERIES_Q = urlencode({"series": SERIES[0], "backend": SERIES[1], "suite": SERIES[2]})
TASK_Q = urlencode({"dag_id": "nightly", "run_id": "scheduled__5", "task_id": "evaluate_gate"})


@pytest.fixture
def ui(monkeypatch, tmp_path):
    client, verdict = ui_client(monkeypatch, tmp_path)
    client.store_url = f"sqlite:///{tmp_path / 'ui.db'}"
    client.verdict = verdict
    return client


def test_the_series_page_opens_on_the_regressed_declaration_at_its_worst_step_with_the_grid(ui):
    page = ui.get(f"/series?{SERIES_Q}", headers=as_user("viewer")).text
    assert "<h2>Overview</h2>" in page
    grid = page[page.index('class="mg-grid"'):page.index("</table>", page.index('class="mg-grid"'))]
    rows = re.findall(r"<tr><td>(\d{4}-\d\d-\d\d)</td><td>(\w+)</td>(.*?)</tr>", grid)
    newest = [(night, status) for night, status, _ in rows][:2]
    assert newest == [("2026-11-06", "untrusted"), ("2026-11-05", "trusted")]
    assert 'class="mg-cell mg-o-fail"' in rows[0][2] and 'class="mg-cell mg-o-pass"' in rows[1][2]
    link = unescape(re.search(r'href="([^"]+)"', rows[0][2])[1])
    assert link.startswith("series?") and "declaration=" in link  # each cell opens its chart
    # the chart opens on the regressed night's declaration and its worst step (both steps fell alike: step 0)
    assert re.search(r"<h3>rollout/raw_reward \(steps all\), step 0</h3>", page)
    assert '<option selected>0</option>' in page


def test_a_mark_from_the_command_line_shows_who_when_and_why_and_keeps_the_counts(ui, monkeypatch, capsys):
    monkeypatch.setenv("METRIC_GATE_USER", "carol")
    assert main(["mark-trusted", "--run-id", "n5", "--reason", "eval set rerun", "--store", ui.store_url]) == 0
    capsys.readouterr()
    page = ui.get(f"/series?{SERIES_Q}", headers=as_user("viewer")).text
    row = next(r for r in page.split("<tr") if "<code>n5</code>" in r)
    assert re.search(r"marked trusted by carol at 20\d\d-\d\d-\d\d \d\d:\d\d UTC: eval set rerun</td>", unescape(row))
    assert "<td>trusted</td><td>0</td><td>2</td><td>0</td><td>0</td>" in row  # the night's counts: 2 FAIL


def _with_shift(monkeypatch, verdict):
    shifted = {**verdict, "level_shifts": [{"metric_key": "rollout/raw_reward", "steps_key": '"all"',
                                            "constraint_key": "{}", "since": "2026-11-06T00:00:00+00:00",
                                            "since_run_id": "n5", "nights": 1, "change": -0.5}]}

    def task_verdict(dag_id, run_id, task_id, map_index):
        return TaskVerdict("EvaluateGateOperator", "failed", shifted) if run_id == "scheduled__5" else None

    monkeypatch.setattr(app_module, "task_verdict", task_verdict)


def _accept_form(ui, user="admin"):
    page = ui.get(f"/task?{TASK_Q}", headers=as_user(user)).text
    match = re.search(r'action="accept"><input type="hidden" name="run_id" value="([^"]+)">'
                      r'<input type="hidden" name="since" value="([^"]+)">'
                      r'<input type="hidden" name="token" value="([^"]+)">', page)
    return page, match


def _post(ui, form, user="admin"):
    return ui.post("/accept", content=urlencode(form), headers={
        **as_user(user), "Content-Type": "application/x-www-form-urlencoded"})


def test_accept_this_level_calls_accept_level_once_with_the_user(ui, monkeypatch):
    _with_shift(monkeypatch, ui.verdict)
    page, match = _accept_form(ui)
    assert match, page
    assert "Accept this level (-50.0 % since 2026-11-06)" in page
    form = {"run_id": match[1], "since": match[2], "token": unescape(match[3]), "reason": "dataset v4 by design",
            "next": "task?" + TASK_Q}
    assert _post(ui, form).status_code == 303
    with open_store(ui.store_url) as store:
        run = store.get_run("n5")
    assert (run.status, run.rebaseline) == ("trusted", True)
    assert run.provenance["marks"][-1] | {"at": None} == {
        "status": "trusted", "by": "admin", "accept": True, "at": None,
        "reason": "accepted level since 2026-11-06T00:00:00+00:00 by admin: dataset v4 by design"}
    assert _post(ui, form).status_code == 403  # used once


def test_accept_needs_edit_rights_and_a_token_for_that_very_night(ui, monkeypatch):
    _with_shift(monkeypatch, ui.verdict)
    page, match = _accept_form(ui, user="viewer")
    assert match is None and "Accept this level" not in page  # a viewer gets no form
    _, match = _accept_form(ui)
    form = {"run_id": match[1], "since": match[2], "token": unescape(match[3]), "reason": "by design"}
    assert _post(ui, form, user="viewer").status_code == 403
    assert _post(ui, {**form, "since": "n2"}).status_code == 403  # the token names its night
    with open_store(ui.store_url) as store:
        assert store.get_run("n5").status == "untrusted"


@pytest.mark.parametrize(("section", "entry", "button"), [
    ("drifts", {"start": "2026-11-02T00:00:00+00:00", "slope": -0.01, "cumulative": -0.05, "side": "below",
                "since_run_id": "n5", "since": "2026-11-06T00:00:00+00:00", "continues": False},
     "Accept this level (drift -5.0 %, reported since 2026-11-06)"),
    ("within_night", {"from_step": 1, "since": "2026-11-06T00:00:00+00:00", "since_run_id": "n5", "nights": 1,
                      "side": "below", "continues": False},
     "Accept this level (worse from step 1 since 2026-11-06)"),
])
def test_a_drift_or_a_night_worse_within_itself_is_offered_the_accept_too(ui, monkeypatch, section, entry, button):
    """The runbook says to decide on a drift or a within-night change as on a level shift: the task page
    lists it and offers the same accept, from the night it was first reported."""
    changed = {**ui.verdict, section: [{"metric_key": "rollout/raw_reward", "steps_key": '"all"',
                                        "constraint_key": "{}", **entry}]}
    monkeypatch.setattr(app_module, "task_verdict", lambda dag_id, run_id, task_id, map_index: TaskVerdict(
        "EvaluateGateOperator", "failed", changed) if run_id == "scheduled__5" else None)
    page, match = _accept_form(ui)
    assert match and match[2] == "n5", page
    assert button in unescape(page)
    assert "<h2>Level shifts and drifts</h2>" in page
    form = {"run_id": match[1], "since": match[2], "token": unescape(match[3]), "reason": "longer schedule",
            "next": "task?" + TASK_Q}
    assert _post(ui, form).status_code == 303
    with open_store(ui.store_url) as store:
        assert (store.get_run("n5").status, store.get_run("n5").rebaseline) == ("trusted", True)
