"""The "Metric gate" view in a real Airflow 3 UI: rendered pages, charts, and who may see and mark what.

Drives ``/usr/bin/chromium`` through Playwright (never a browser Playwright downloads) against the
api-server of ``ui_server`` (see ``conftest.py``), and takes screenshots of both pages: into a
temporary folder, or into ``docs/img/`` (the runbook's on-call section) when
``METRIC_GATE_REFRESH_DOCS_IMAGES=1`` asks to refresh the docs images.
"""

from __future__ import annotations

import os
import re
import urllib.parse
from pathlib import Path

import pytest
from _ui_env import BACKEND, CHROMIUM, DAG_ID, PASSWORDS, REPO_ROOT, SERIES, SUITE, UiServer

pytestmark = [pytest.mark.browser, pytest.mark.postgres]

#: Set to ``1`` to write the screenshots over the tracked ``docs/img/*.png`` (else a temporary folder).
REFRESH_DOCS_IMAGES = "METRIC_GATE_REFRESH_DOCS_IMAGES"
DOCS_IMAGES = REPO_ROOT / "docs" / "img"
LAUNCH_ARGS = [
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
    "--disable-component-update", "--disable-sync", "--no-first-run",
]


@pytest.fixture
def shots(tmp_path: Path) -> Path:
    """Where the screenshots go: ``docs/img/`` only when asked to refresh them, else a temporary folder."""
    if os.environ.get(REFRESH_DOCS_IMAGES) == "1":
        return DOCS_IMAGES
    return tmp_path


def _task_path(server: UiServer) -> str:
    query = urllib.parse.urlencode(
        {"dag_id": DAG_ID, "run_id": server.bad_run_id, "task_id": "metric_gate.evaluate_gate",
         "map_index": "{MAP_INDEX}"}
    )
    return f"/metric-gate/task?{query}"


def _series_path(**extra: str) -> str:
    return "/metric-gate/series?" + urllib.parse.urlencode(
        {"series": SERIES, "backend": BACKEND, "suite": SUITE, **extra}
    )


def test_every_endpoint_refuses_anonymous_and_dagless_users(ui_server: UiServer) -> None:
    paths = ["/metric-gate/", _series_path(), _task_path(ui_server)]
    for path in paths:
        status, _ = ui_server.request(path)
        assert status == 401, path
    status, _ = ui_server.request("/metric-gate/mark", data=b"run_id=x&status=trusted&reason=abc&token=t")
    assert status == 401
    status, _ = ui_server.request(_task_path(ui_server), token="not-a-jwt")
    assert status in (401, 403)

    outsider = ui_server.token("outsider")
    # a series the user may not read answers as one that does not exist (no existence oracle)
    for path, expected in ((_series_path(), 404), (_task_path(ui_server), 403)):
        status, body = ui_server.request(path, token=outsider)
        assert status == expected, (path, body[:300])
    status, body = ui_server.request("/metric-gate/", token=outsider)
    assert status == 200 and SERIES not in body  # the index lists only readable series

    viewer = ui_server.token("viewer")
    status, body = ui_server.request(_task_path(ui_server), token=viewer)
    assert status == 200 and "rollout/raw_reward" in body


def test_marking_needs_edit_permission_a_reason_and_the_form_token(ui_server: UiServer) -> None:
    run_id = ui_server.bad_verdict["run_id"]
    admin, viewer = ui_server.token("admin"), ui_server.token("viewer")

    status, page = ui_server.request(_series_path(), token=viewer)
    assert status == 200 and "mark untrusted" not in page and "mark trusted" not in page  # viewer: no form

    status, page = ui_server.request(_series_path(), token=admin)
    assert status == 200
    token = re.search(
        rf'name="run_id" value="{run_id}">.*?name="token" value="([0-9a-f.]+)"', page, flags=re.S
    ).group(1)
    form = {"run_id": run_id, "status": "trusted", "reason": "reward drop is the new eval prompt",
            "token": token, "next": "series?series=" + SERIES}
    body = urllib.parse.urlencode(form).encode()

    status, _ = ui_server.request("/metric-gate/mark", token=viewer, data=body)
    assert status == 403  # a viewer may read the DAG, not edit it
    bad_token = urllib.parse.urlencode({**form, "token": "0" * 64}).encode()
    assert ui_server.request("/metric-gate/mark", token=admin, data=bad_token)[0] == 403
    no_reason = urllib.parse.urlencode({**form, "reason": "  "}).encode()
    assert ui_server.request("/metric-gate/mark", token=admin, data=no_reason)[0] == 400
    elsewhere = urllib.parse.urlencode({**form, "next": "https://example.org/"}).encode()
    assert ui_server.request("/metric-gate/mark", token=admin, data=elsewhere)[0] == 400

    from airflow_metric_gate.store import open_store

    with open_store(ui_server.store_url) as store:
        assert store.get_run(run_id).status == "untrusted"
        status, _ = ui_server.request("/metric-gate/mark", token=admin, data=body)
        assert status == 303
        run = store.get_run(run_id)
        assert run.status == "trusted"
        assert run.provenance["marks"][-1]["by"] == "admin"
        assert run.provenance["marks"][-1]["reason"] == form["reason"]
        assert ui_server.request("/metric-gate/mark", token=admin, data=body)[0] == 403  # a token marks once
        # put it back for the other tests, with the form the page now offers
        _, page = ui_server.request(_series_path(), token=admin)
        token = re.search(
            rf'name="run_id" value="{run_id}">.*?name="token" value="([0-9a-f.]+)"', page, flags=re.S
        ).group(1)
        back = {**form, "status": "untrusted", "reason": "back to the evaluated status", "token": token}
        assert ui_server.request("/metric-gate/mark", token=admin, data=urllib.parse.urlencode(back).encode())[0] == 303
        assert store.get_run(run_id).status == "untrusted"


def _fmt(x: float) -> str:
    return f"{x:.6g}"


def _login(page, server: UiServer, user: str) -> None:  # noqa: ANN001
    page.goto(f"{server.url}/auth/login")
    page.fill("input[name=username]", user)
    page.fill("input[name=password]", PASSWORDS[user])
    page.click("button[type=submit]")
    page.wait_for_url(lambda url: "/auth/login" not in url, timeout=60_000)


def test_on_call_sees_the_regression_and_the_series_in_the_airflow_ui(ui_server: UiServer, shots: Path) -> None:
    from playwright.sync_api import expect, sync_playwright

    verdict = ui_server.bad_verdict
    # the failing steps (the packaged gates file is calibrated: the night's own result has no step)
    fails = [r for r in verdict["results"] if r["status"] == "FAIL" and r["step"] is not None]
    assert fails and {r["metric_key"] for r in fails} == {"rollout/raw_reward"}
    shots.mkdir(parents=True, exist_ok=True)
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=str(CHROMIUM), args=LAUNCH_ARGS, headless=True)
        try:
            page = browser.new_page(viewport={"width": 1280, "height": 1700})
            _login(page, ui_server, "viewer")

            # The task-instance tab of the regressed night's evaluate task, inside the Airflow UI.
            run = urllib.parse.quote(ui_server.bad_run_id, safe="")
            page.goto(f"{ui_server.url}/dags/{DAG_ID}/runs/{run}/tasks/metric_gate.evaluate_gate/plugin/metric-gate-task")
            frame = page.frame_locator("iframe[title='Metric gate']")
            summary = frame.locator(".mg-summary li").first
            expect(summary).to_contain_text("rollout/raw_reward", timeout=60_000)
            first, last = min(r["step"] for r in fails), max(r["step"] for r in fails)
            expect(summary).to_contain_text(f"{len(fails)} FAIL from step {first} to {last}, below the band")
            counts = verdict["counts"]
            expect(frame.locator(".mg-counts")).to_have_text(
                f"{counts['PASS']} PASS, {counts['FAIL']} FAIL, {counts['INACTIVE']} INACTIVE, {counts['ERROR']} ERROR"
                + (f"; {verdict['blocking']} enforced" if verdict["blocking"] else "")
            )
            # One history chart per failing coordinate: a point per night, tonight's highlighted, and the band.
            history = frame.locator("svg.mg-chart:not([data-failing])")
            expect(history).to_have_count(len(fails))
            for i in range(len(fails)):
                chart = history.nth(i)
                expect(chart.locator(".mg-point")).to_have_count(ui_server.nights)
                expect(chart.locator(".mg-point.mg-tonight")).to_have_count(1)
                expect(chart.locator(".mg-point.mg-trusted")).to_have_count(ui_server.nights - 1)
                expect(chart.locator("rect.mg-band")).to_have_count(1)
            bands = {(chart.get_attribute("data-lo"), chart.get_attribute("data-hi"))
                     for chart in history.locator("rect.mg-band").all()}
            assert bands == {(_fmt(r["lo"]), _fmt(r["hi"])) for r in fails}
            # steps="all": tonight's values over training steps against the band of each step.
            steps = frame.locator("svg.mg-chart[data-failing]")
            expect(steps).to_have_count(1)
            expect(steps).to_have_attribute("data-failing", str(len(fails)))
            expect(steps.locator(".mg-point.mg-step-fail")).to_have_count(len(fails))
            expect(steps.locator("polygon.mg-band")).to_have_count(1)
            page.wait_for_timeout(500)
            page.screenshot(path=str(shots / "ui-task-instance.png"))

            # The series page, reached from the navigation entry.
            page.goto(f"{ui_server.url}/plugin/metric-gate")
            frame = page.frame_locator("iframe[title='Metric gate']")
            frame.get_by_role("link", name=SERIES).click()
            expect(frame.locator("table.mg-runs tr.mg-run")).to_have_count(ui_server.nights, timeout=60_000)
            expect(frame.locator("tr.mg-run-untrusted")).to_have_count(1)
            # The overview: a row per night, a cell per declaration; only the regressed night's reward is red.
            grid = frame.locator("table.mg-grid")
            expect(grid.locator("td.mg-cell")).to_have_count(ui_server.nights * len(
                frame.locator("select[name=declaration] option").all()))
            expect(grid.locator("td.mg-o-fail")).to_have_count(1)
            # Without a choice the chart opens on the regressed declaration at its worst step.
            worst = fails[0]
            expect(frame.locator("h3")).to_contain_text(f"{worst['metric_key']} (steps all), step {worst['step']}")
            expect(frame.locator("svg.mg-chart .mg-point.mg-untrusted")).to_have_count(1)
            grid.locator("td.mg-o-fail a").click()  # a cell opens its declaration's chart
            expect(frame.locator("h3")).to_contain_text(worst["metric_key"], timeout=60_000)
            # ... and its night chart: the calibrated night statistic of each judged night against its band
            night_chart = frame.locator("svg.mg-chart[data-measure='z']")
            expect(night_chart).to_have_count(1)
            expect(frame.locator("h2.mg-nights-head")).to_contain_text(f"{worst['metric_key']} (steps all) over the "
                                                                       "nights")
            expect(night_chart.locator(".mg-point.mg-night-fail")).to_have_count(1)
            judged = night_chart.locator(".mg-point.mg-night").count()
            expect(night_chart.locator("polygon.mg-band")).to_have_attribute("data-nights", str(judged))
            frame.locator("select[name=declaration]").select_option(
                label=f"{fails[0]['metric_key']} (steps all)"
            )
            frame.get_by_role("button", name="chart").click()
            chart = frame.locator("svg.mg-chart:not([data-measure])")  # the coordinate's chart, not the night chart
            expect(chart).to_have_count(1, timeout=60_000)
            expect(frame.locator("h3")).to_contain_text(fails[0]["metric_key"])
            expect(chart.locator(".mg-point")).to_have_count(ui_server.nights)
            expect(chart.locator(".mg-point.mg-untrusted")).to_have_count(1)
            page.wait_for_timeout(500)
            page.set_viewport_size({"width": 1280, "height": 1000})
            page.wait_for_timeout(300)
            page.screenshot(path=str(shots / "ui-series.png"))

            # An admin marks the regressed night trusted from the series page (inside the UI's iframe).
            admin = browser.new_page(viewport={"width": 1280, "height": 1000})
            _login(admin, ui_server, "admin")
            admin.goto(f"{ui_server.url}/plugin/metric-gate")
            frame = admin.frame_locator("iframe[title='Metric gate']")
            frame.get_by_role("link", name=SERIES).click()
            row = frame.locator("tr.mg-run-untrusted")
            expect(row).to_have_count(1, timeout=60_000)
            row.locator("input[name=reason]").fill("reward dip explained by the new eval seed")
            row.get_by_role("button", name="mark trusted").click()
            expect(frame.locator("tr.mg-run-untrusted")).to_have_count(0, timeout=60_000)
            expect(frame.locator("table.mg-runs")).to_contain_text(  # who, when and why
                re.compile(r"marked trusted by admin at \d{4}-\d\d-\d\d \d\d:\d\d UTC: reward dip explained by the "
                           r"new eval seed")
            )
            row = frame.locator("tr.mg-run").first
            expect(row.locator("td").nth(4)).to_have_text(str(verdict["counts"]["FAIL"]))  # counts kept
            row.locator("input[name=reason]").fill("back to the evaluated status")
            row.get_by_role("button", name="mark untrusted").click()
            expect(frame.locator("tr.mg-run-untrusted")).to_have_count(1, timeout=60_000)

            # A logged-in user without access to the DAG gets a refusal inside the same tab.
            other = browser.new_page(viewport={"width": 1280, "height": 900})
            _login(other, ui_server, "outsider")
            response = other.goto(f"{ui_server.url}{_task_path(ui_server)}")
            assert response is not None and response.status == 403
            expect(other.locator("h1")).to_have_text("Forbidden")
        finally:
            browser.close()


def test_an_admin_accepts_the_reported_level_with_the_button_of_the_metric_gate_tab(ui_server: UiServer) -> None:
    """Runs last: it rebaselines the series from the regressed night, as on-call would after a wanted change."""
    from playwright.sync_api import expect, sync_playwright

    from airflow_metric_gate.store import open_store

    verdict = ui_server.bad_verdict
    shifts = [x for x in verdict.get("level_shifts") or () if not x.get("adopted")]
    assert shifts, verdict.get("level_shifts")  # the regressed calibrated night reports a level shift
    store_run = verdict["run_id"]
    with open_store(ui_server.store_url) as store:
        before = store.get_run(store_run)
    assert (before.status, before.rebaseline) == ("untrusted", False)
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=str(CHROMIUM), args=LAUNCH_ARGS, headless=True)
        try:
            page = browser.new_page(viewport={"width": 1280, "height": 1400})
            _login(page, ui_server, "admin")
            run = urllib.parse.quote(ui_server.bad_run_id, safe="")
            page.goto(f"{ui_server.url}/dags/{DAG_ID}/runs/{run}/tasks/metric_gate.evaluate_gate/plugin/metric-gate-task")
            frame = page.frame_locator("iframe[title='Metric gate']")
            form = frame.locator("form.mg-accept")
            expect(form).to_have_count(1, timeout=60_000)
            button = form.get_by_role("button", name=re.compile(r"^Accept this level"))
            expect(button).to_contain_text(f"since {str(shifts[0]['since'])[:10]}")
            button.click()  # without a reason the browser refuses to send the form
            with open_store(ui_server.store_url) as store:
                assert store.get_run(store_run).rebaseline is False
            form.locator("input[name=reason]").fill("new dataset version, the lower reward is expected")
            button.click()
            # back on the tab: the night is trusted now, so its mark form offers the opposite
            expect(frame.get_by_role("button", name="mark untrusted")).to_have_count(1, timeout=60_000)
            with open_store(ui_server.store_url) as store:
                after = store.get_run(store_run)
            assert (after.status, after.rebaseline) == ("trusted", True)
            mark = after.provenance["marks"][-1]
            assert mark["by"] == "admin" and mark["accept"] is True
            assert mark["reason"].endswith("new dataset version, the lower reward is expected")
            # the series page shows who accepted, when and why
            page.goto(f"{ui_server.url}/plugin/metric-gate")
            frame = page.frame_locator("iframe[title='Metric gate']")
            frame.get_by_role("link", name=SERIES).click()
            expect(frame.locator("table.mg-runs")).to_contain_text(re.compile(
                r"accepted the level by admin at \d{4}-\d\d-\d\d \d\d:\d\d UTC: accepted level since .*new dataset "
                r"version, the lower reward is expected"), timeout=60_000)
            expect(frame.locator("tr.mg-run-untrusted")).to_have_count(0)
        finally:
            browser.close()
