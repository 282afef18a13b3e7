"""The "Metric gate" UI app as the api-server serves it, in-process: hostile input and replayed forms.

Bodies too large are refused before they are read, form tokens are bound and used once, users
without rights learn nothing about what exists, every page carries the security headers, and every
bad parameter is a 400; the task page shows the night's warnings.
"""

from __future__ import annotations

import asyncio
import re
from html import unescape
from urllib.parse import urlencode

import pytest
from _ui_app import SERIES, as_user, ui_client

from airflow_metric_gate.plugins import auth
from airflow_metric_gate.plugins.app import MAX_FORM_BYTES
from airflow_metric_gate.plugins.pages import STYLE
from airflow_metric_gate.store import open_store

SERIES_Q = urlencode({"series": SERIES[0], "backend": SERIES[1], "suite": SERIES[2]})
TASK_Q = urlencode({"dag_id": "nightly", "run_id": "scheduled__5", "task_id": "evaluate_gate"})


@pytest.fixture
def ui(monkeypatch, tmp_path):
    client, verdict = ui_client(monkeypatch, tmp_path)
    client.store_url = f"sqlite:///{tmp_path / 'ui.db'}"
    return client


def _form(client, run_id, user="admin"):
    page = client.get(f"/series?{SERIES_Q}", headers=as_user(user)).text
    match = re.search(r'name="run_id" value="' + re.escape(run_id) + r'">.*?name="status" value="(\w+)">'
                      r'<input type="hidden" name="token" value="([^"]+)">', page)
    assert match, page
    return {"run_id": run_id, "status": match[1], "token": unescape(match[2]), "reason": "checked by hand",
            "next": "series?" + SERIES_Q}


def _post(client, form, user="admin", **headers):
    return client.post("/mark", content=urlencode(form), headers={
        **as_user(user), "Content-Type": "application/x-www-form-urlencoded", **headers})


def _status(client, run_id):
    with open_store(client.store_url) as store:
        return store.get_run(run_id).status


# -- 7. bodies too large are refused before they are read ----------------------------------------


def _asgi_post(app, *, headers, chunks):
    """POST /mark straight through ASGI; return (status, how many body chunks the app read)."""
    read = {"chunks": 0}
    sent = {}
    pending = list(chunks)

    async def receive():
        if not pending:
            return {"type": "http.request", "body": b"", "more_body": False}
        read["chunks"] += 1
        return {"type": "http.request", "body": pending.pop(0), "more_body": bool(pending)}

    async def send(message):
        if message["type"] == "http.response.start":
            sent["status"] = message["status"]
            sent["headers"] = {k.decode().lower(): v.decode() for k, v in message["headers"]}

    scope = {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": "POST", "scheme": "http",
             "path": "/mark", "raw_path": b"/mark", "query_string": b"", "root_path": "", "server": ("t", 80),
             "client": ("c", 1), "headers": [(k.lower().encode(), v.encode()) for k, v in headers.items()]}
    asyncio.run(app(scope, receive, send))
    return sent["status"], read["chunks"], sent["headers"]


def test_a_body_announced_too_large_is_refused_without_reading_it(ui):
    headers = {**as_user("viewer"), "content-type": "application/x-www-form-urlencoded",
               "content-length": str(400 * 1024 * 1024)}
    status, chunks, sent = _asgi_post(ui.app, headers=headers, chunks=[b"x" * 65536] * 6400)
    assert status == 413 and chunks == 0
    assert sent["x-content-type-options"] == "nosniff"


def test_a_chunked_body_is_refused_as_soon_as_it_passes_the_limit(ui):
    headers = {**as_user("viewer"), "content-type": "application/x-www-form-urlencoded"}
    status, chunks, _ = _asgi_post(ui.app, headers=headers, chunks=[b"x" * 4096] * 100_000)
    assert status == 413
    assert chunks <= MAX_FORM_BYTES // 4096 + 1  # a few KB read, not 400 MB


# -- 8. the form token: bound to user, run and action, expiring, single use ----------------------


def test_a_form_token_marks_once(ui):
    form = _form(ui, "n5")
    assert form["status"] == "trusted"  # the regressed night is untrusted: its form marks it trusted
    first = _post(ui, form)
    assert first.status_code == 303 and _status(ui, "n5") == "trusted"
    again = _post(ui, form)
    assert again.status_code == 403 and "invalid, used or expired form token" in again.text
    assert _status(ui, "n5") == "trusted"


def test_a_form_token_cannot_flip_the_action_it_was_issued_for(ui):
    form = _form(ui, "n5")
    flipped = _post(ui, {**form, "status": "untrusted"})
    assert flipped.status_code == 403 and _status(ui, "n5") == "untrusted"


def test_a_form_token_is_bound_to_its_user_and_its_run(ui, monkeypatch):
    form = _form(ui, "n5")
    other_run = _post(ui, {**form, "run_id": "n4"})
    assert other_run.status_code == 403
    # a second admin cannot post the first one's token
    monkeypatch.setattr(auth, "is_authorized", lambda user, dag_id, method: True)
    assert _post(ui, form, user="viewer").status_code == 403
    assert _status(ui, "n5") == "untrusted" and _status(ui, "n4") == "trusted"


def test_a_form_token_expires(ui, monkeypatch):
    form = _form(ui, "n5")
    later = auth.time.time() + auth.FORM_TOKEN_TTL_SECONDS + 5
    monkeypatch.setattr(auth.time, "time", lambda: later)
    assert _post(ui, form).status_code == 403 and _status(ui, "n5") == "untrusted"


def test_a_token_issued_before_someone_else_marked_the_run_is_void(ui):
    form = _form(ui, "n5")
    with open_store(ui.store_url) as store:  # the run changes meanwhile (another user, the CLI)
        store.mark_run("n5", "trusted", reason="by the CLI", marked_by="oncall", at=auth_now())
        store.mark_run("n5", "untrusted", reason="back again", marked_by="oncall", at=auth_now())
    assert _post(ui, form).status_code == 403


def auth_now():
    from datetime import datetime, timezone

    return datetime.now(timezone.utc)


# -- 9. no existence oracle ----------------------------------------------------------------------


def test_a_user_without_rights_gets_the_same_answer_for_unknown_and_existing_runs(ui):
    form = {"status": "trusted", "token": "1.2.3", "reason": "trying", "next": "./"}
    unknown = _post(ui, {**form, "run_id": "no-such-run"}, user="outsider")
    existing = _post(ui, {**form, "run_id": "n5"}, user="outsider")
    assert unknown.status_code == existing.status_code == 404
    assert unknown.text.replace("no-such-run", "X") == existing.text.replace("n5", "X")

    unknown = ui.get("/series?" + urlencode({"series": "nope", "backend": "cuda", "suite": "x"}),
                     headers=as_user("outsider"))
    existing = ui.get(f"/series?{SERIES_Q}", headers=as_user("outsider"))
    assert unknown.status_code == existing.status_code == 404


def test_a_viewer_may_read_but_not_mark(ui):
    assert ui.get(f"/series?{SERIES_Q}", headers=as_user("viewer")).status_code == 200
    assert 'name="token"' not in ui.get(f"/series?{SERIES_Q}", headers=as_user("viewer")).text
    form = _form(ui, "n5")
    assert _post(ui, form, user="viewer").status_code == 403


# -- 10. security headers --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("method", "path", "user", "code"),
    [("GET", "/", "viewer", 200), ("GET", f"/series?{SERIES_Q}", "admin", 200),
     ("GET", f"/task?{TASK_Q}", "admin", 200), ("GET", "/series", "viewer", 400), ("GET", "/", None, 401),
     ("GET", "/nowhere", "viewer", 404),
     ("PUT", "/mark", "viewer", 405), ("POST", "/mark", "viewer", 400)],
)
def test_every_response_carries_the_security_headers(ui, method, path, user, code):
    response = ui.request(method, path, headers=as_user(user) if user else {})
    assert response.status_code == code, response.text
    csp = response.headers["content-security-policy"]
    assert "default-src 'none'" in csp and "script-src" not in csp and "frame-ancestors 'self'" in csp
    assert response.headers["x-content-type-options"] == "nosniff"
    assert response.headers["cache-control"] == "no-store"


def test_the_policy_allows_the_pages_own_stylesheet_and_nothing_inline_else(ui):
    import base64
    import hashlib

    response = ui.get(f"/series?{SERIES_Q}", headers=as_user("admin"))
    digest = base64.b64encode(hashlib.sha256(STYLE.encode()).digest()).decode()
    assert f"style-src 'sha256-{digest}'" in response.headers["content-security-policy"]
    assert response.text.count("<style>") == 1 and "<script" not in response.text and " style=" not in response.text


# -- 11. bad parameters are 400s with a short message ----------------------------------------------


@pytest.mark.parametrize(
    "query",
    [f"/series?{SERIES_Q}&declaration=" + "[" * 2000, "/series?series=a%00b&backend=cuda&suite=s",
     f"/task?{TASK_Q}&map_index={2**63}", f"/task?{TASK_Q.replace('evaluate_gate', 'eval%00uate')}",
     f"/series?{SERIES_Q}&step={2**63}", f"/series?{SERIES_Q}&step=1e400", f"/series?{SERIES_Q}&page={10**30}"],
    ids=["deep-declaration", "nul-series", "huge-map-index", "nul-task", "huge-step", "float-step", "huge-page"],
)
def test_a_bad_parameter_is_a_400_with_a_short_message(monkeypatch, tmp_path, query):
    client, _ = ui_client(monkeypatch, tmp_path, raise_server_exceptions=False)
    response = client.get(query, headers=as_user("admin"))
    assert response.status_code == 400, response.text
    assert "Traceback" not in response.text and len(response.text) < 4000


# -- 1. the night's warnings on the task page ------------------------------------------------------


def test_the_task_page_shows_the_points_the_record_lost(ui):
    page = ui.get(f"/task?{TASK_Q}", headers=as_user("viewer")).text
    assert "<h2>Warnings</h2>" in page
    assert "step 2: value null" in page and "night5.jsonl line 1" in page
