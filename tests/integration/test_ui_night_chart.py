"""A declaration's night chart: what each night keeps in ``runs.outcomes`` and the series page draws.

Calibrated nights keep their statistic ``z`` and its band ``q``; reference nights keep their worst
distance outside a step's band.  Both are read back from the real stores (SQLite and Postgres).
"""

from __future__ import annotations

import json
import math
import random
import re
from datetime import datetime, timedelta, timezone
from html import unescape
from urllib.parse import urlencode

import pytest
from _ui_app import DAG_ID, SERIES, as_user, ui_client

from airflow_metric_gate.cli import main
from airflow_metric_gate.declarations import declare
from airflow_metric_gate.pipeline import RunInfo, SeriesIdentity, evaluate, persist
from airflow_metric_gate.plugins import app as app_module
from airflow_metric_gate.plugins.charts import night_chart
from airflow_metric_gate.plugins.data import MEASURE_Z, night_points
from airflow_metric_gate.plugins.metadata import TaskVerdict
from airflow_metric_gate.records import read_record
from airflow_metric_gate.selection import select_steps
from airflow_metric_gate.store import open_store

STEPS = 40
REWARD_KEY = ("rollout/raw_reward", '"all"')
GATES = "policy: calibrated\ngates:\n  - metric_key: rollout/raw_reward\n    enforce: true\n"


def _night(capsys, tmp_path, store_url, day, rng, factor=1.0):
    path = tmp_path / f"night{day}.jsonl"
    shared = rng.gauss(0.0, 0.015)
    series = [[s, (0.2 + 0.6 * (1 - math.exp(-4 * s / STEPS))) * (1 + shared + rng.gauss(0, 0.02)) * factor]
              for s in range(STEPS)]
    path.write_text(json.dumps({"metric": "rollout/raw_reward", "series": series}) + "\n")
    code = main(["run", str(path), "--gates", str(tmp_path / "gates.yaml"), "--series", "rl", "--store", store_url,
                 "--run-id", f"night-{day:02d}", "--logical-date", f"2026-11-{1 + day:02d}T00:00:00Z", "--json"])
    out, err = capsys.readouterr()
    assert code in (0, 1), err
    return json.loads(out)


def test_calibrated_nights_keep_their_statistic_and_band_for_the_night_chart(capsys, tmp_path, store_url):
    (tmp_path / "gates.yaml").write_text(GATES)
    rng = random.Random(3)
    verdicts = [_night(capsys, tmp_path, store_url, day, rng) for day in range(12)]
    verdicts.append(_night(capsys, tmp_path, store_url, 12, rng, factor=0.8))  # -20 %: the night fails
    tonight = verdicts[-1]["declarations"][0]
    assert tonight["outcome"] == "fail"
    with open_store(store_url) as store:
        identity = store.series_identities()[0]
        runs = store.series_runs(identity["series"], identity["backend"], identity["suite"], declarations=True)
    key = next((d["metric_key"], d["steps_key"], d["constraint_key"]) for d in runs[0].declarations)
    assert key[:2] == REWARD_KEY
    measure, points = night_points(runs, key)
    assert measure == MEASURE_Z
    judged = [v["declarations"][0] for v in verdicts if "z" in v["declarations"][0]]
    assert len(points) == len(judged) >= 5  # every judged night, oldest first; cold nights kept no z
    assert [p.run_id for p in points] == sorted(p.run_id for p in points)
    for p, d in zip(points, judged):  # the chart draws what the verdict said that night
        assert p.value == pytest.approx(d["z"]) and p.hi == pytest.approx(d["threshold"])
        assert p.lo == pytest.approx(-d["threshold"]) and p.outcome == d["outcome"]
    assert points[-1].outcome == "fail" and not points[-1].lo <= points[-1].value <= points[-1].hi
    assert all(p.lo <= p.value <= p.hi for p in points[:-1])
    svg = night_chart(points, measure, label="reward")
    assert 'data-measure="z"' in svg and f'data-points="{len(points)}"' in svg
    assert f'data-nights="{len(points)}"' in svg  # the band spans every night that kept one
    assert len(re.findall(r'class="mg-point mg-night mg-night-fail"', svg)) == 1


@pytest.fixture
def ui(monkeypatch, tmp_path):
    client, _ = ui_client(monkeypatch, tmp_path)
    return client


def test_the_overview_cell_opens_the_declarations_night_chart_with_its_worst_distance(ui):
    q = urlencode({"series": SERIES[0], "backend": SERIES[1], "suite": SERIES[2]})
    page = ui.get(f"/series?{q}", headers=as_user("viewer")).text
    grid = page[page.index('class="mg-grid"'):]
    link = unescape(re.search(r'<td class="mg-cell mg-o-fail"><a href="([^"]+)"', grid)[1])
    chart_page = ui.get("/" + link, headers=as_user("viewer")).text
    assert "rollout/raw_reward (steps all) over the nights</h2>" in chart_page
    svg = re.search(r'<svg class="mg-chart" role="img" aria-label="rollout/raw_reward over the nights".*?</svg>',
                    chart_page, re.S)[0]
    assert 'data-measure="distance"' in svg
    # the reference fixture: a cold first night (no measure), four passing nights at 0, then 0.4 -> 0.72 band edge
    titles = re.findall(r"<circle class=\"mg-point mg-night mg-night-(\w+)\"[^>]*><title>([^<]*)</title>", svg)
    assert [o for o, _ in titles] == ["pass"] * 4 + ["fail"]
    assert all("worst distance 0 " in t for _, t in titles[:4])
    assert "worst distance 0.4 " in titles[-1][1]


def _calibrated_store(tmp_path) -> tuple[str, dict]:
    """Twelve ordinary nights of a calibrated reward written by DAG ``nightly``, then a -10 % night."""
    tmp_path.mkdir(exist_ok=True)
    url = f"sqlite:///{tmp_path / 'calibrated.db'}"
    gate = declare("rollout/raw_reward", steps="all", constraint={"rel_up": 0.1, "rel_down": 0.1},
                   policy="calibrated")
    rng = random.Random(5)
    verdict: dict = {}
    with open_store(url) as store:
        for night in range(13):
            shared = rng.gauss(0.0, 0.015)
            factor = 0.9 if night == 12 else 1.0
            series = [[s, 0.8 * (1 + shared + rng.gauss(0, 0.02)) * factor] for s in range(STEPS)]
            path = tmp_path / f"cal{night}.jsonl"
            path.write_text(json.dumps({"metric": "rollout/raw_reward", "series": series}) + "\n")
            run = RunInfo(f"c{night}", logical_date=datetime(2026, 11, 1, tzinfo=timezone.utc) + timedelta(days=night),
                          provenance={"dag_id": DAG_ID, "airflow_run_id": f"scheduled__{night}"})
            persist(store, SeriesIdentity(*SERIES), run, select_steps(read_record(path), [gate]))
            verdict = evaluate(store, run.run_id)
    return url, verdict


def test_the_steps_chart_of_a_calibrated_declaration_draws_the_bands_it_was_judged_with(ui, monkeypatch, tmp_path):
    reference_page = ui.get("/task?" + urlencode({"dag_id": DAG_ID, "run_id": "scheduled__5",
                                                  "task_id": "evaluate_gate"}), headers=as_user("viewer")).text
    assert 'data-band="reference"' in reference_page and ">baseline band</text>" in reference_page
    url, verdict = _calibrated_store(tmp_path / "cal")
    assert verdict["policy"] == "calibrated" and verdict["declarations"][0]["outcome"] == "fail"
    listed = {r["step"]: r for r in verdict["results"] if r["step"] is not None and r.get("lo") is not None}
    assert listed and all(r["bound"] == "calibrated" for r in listed.values() if r["status"] == "FAIL")
    assert len(listed) < STEPS  # some steps passed: a reference band would have covered them too
    monkeypatch.setattr(app_module, "open_ui_store", lambda: open_store(url))
    monkeypatch.setattr(app_module, "task_verdict",
                        lambda *a: TaskVerdict("EvaluateGateOperator", "failed", verdict))
    page = ui.get("/task?" + urlencode({"dag_id": DAG_ID, "run_id": "scheduled__12", "task_id": "evaluate_gate"}),
                  headers=as_user("viewer")).text
    svg = re.search(r'<svg class="mg-chart" role="img" aria-label="rollout/raw_reward over training steps".*?</svg>',
                    page, re.S)[0]
    assert 'data-band="calibrated"' in svg and "calibrated step band (as judged)" in svg
    # the band spans exactly the steps the verdict lists with their calibrated band, not a reference band
    assert f'data-steps="{len(listed)}"' in svg
    assert "Calibrated policy: the band drawn is each listed step&#x27;s own band" in page
    # the task page says what each declaration did tonight
    assert '<table class="mg-declarations">' in page and "<td>fail</td><td class=\"mg-trust\">no</td>" in page
