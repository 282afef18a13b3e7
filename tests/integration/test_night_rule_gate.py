"""The opt-in whole-night rule ``night_mean_k`` through evaluate and replay, on both stores."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest

from airflow_metric_gate.declarations import declare
from airflow_metric_gate.pipeline import RunInfo, SeriesIdentity, evaluate, persist
from airflow_metric_gate.replay import replay
from airflow_metric_gate.report import render_report
from airflow_metric_gate.schemas.verdict import VerdictSchema
from airflow_metric_gate.selection import Selection

T0 = datetime(2026, 6, 1, tzinfo=timezone.utc)
IDENTITY = SeriesIdentity("job", "cuda", "nightly")
WIDE = {"rel_up": 0.5, "rel_down": 0.5}
STEPS = [0, 1, 2, 3]
PLAIN = declare("loss", steps=STEPS, constraint=WIDE)
NIGHT = declare("loss", steps=STEPS, constraint=WIDE, night_mean_k=3.5)
# Nights by hand (history_limit 20, min_history 1); every step of a night has the same value in
# n1..n10.  n1..n10 have fewer than 10 baseline values per step: no robust z, no night statistic,
# and the constraint band ([0.5, 1.5] around ~1) passes every step.
#   n11  1.1 on the 4 steps: each step's history n1..n10 has median 1.0 and MAD 0.05
#        (|v - 1|: 0 .1 .1 .2 .2 0 .05 .05 0 0), so z = 2 on each, 8 / sqrt(4) = 4 > 3.5: FAIL
#        (no step leaves its band: the night as a whole fails)
#   n12  1.1, 0.9, 1.05, 1.0: same history (n11 untrusted, not fed): z 2, -2, 1, 0; 1 / 2 = 0.5: PASS
#   n13  1.08 on the 4 steps: history n1..n10 + n12 per step (11 values): step 0 [.. 1.1]: median
#        1.0, MAD 0.05; z 1.6 on each, 6.4 / 2 = 3.2: PASS
HISTORY = [1.0, 1.1, 0.9, 1.2, 0.8, 1.0, 1.05, 0.95, 1.0, 1.0]
NIGHTS = [[v] * 4 for v in HISTORY] + [[1.1] * 4, [1.1, 0.9, 1.05, 1.0], [1.08] * 4]
RUNS = [f"n{i}" for i in range(1, len(NIGHTS) + 1)]


def _fill(store, declaration, enforce=False):
    verdicts = {}
    for day, (run_id, values) in enumerate(zip(RUNS, NIGHTS)):
        run = RunInfo(run_id, logical_date=T0 + timedelta(days=day))
        points = [(step, value, step) for step, value in zip(STEPS, values)]
        persist(store, IDENTITY, run, [Selection(declaration, points=points)])
        verdicts[run_id] = evaluate(store, run_id, enforce=enforce)
    return verdicts


def test_a_night_no_step_of_which_fails_fails_as_a_whole(store):
    verdicts = _fill(store, NIGHT, enforce=True)
    assert [r for r, v in verdicts.items() if not v["trusted"]] == ["n11"]
    n11 = verdicts["n11"]
    assert n11["counts"] == {"PASS": 4, "FAIL": 1, "INACTIVE": 0, "ERROR": 0}
    assert n11["blocking"] == 1
    [night] = n11["results"]
    assert (night["step"], night["at_step"], night["bound"], night["side"], night["n"]) == (
        None, None, "night_mean", "above", 4)
    assert (night["current"], night["ref"], night["lo"], night["hi"]) == (pytest.approx(4.0), 0.0, -3.5, 3.5)
    assert night["reason"].endswith("mean 2, x sqrt(4) = 4 is above hi 3.5 (night_mean_k); off by 0.5")
    VerdictSchema().load(n11)
    assert n11["summary"][0]["night"]["statistic"] == pytest.approx(4.0)
    assert render_report(n11).summary[0].startswith('REGRESSED loss (steps [0,1,2,3]): 0 of 4 steps FAIL')
    assert verdicts["n12"]["counts"]["PASS"] == 4 and verdicts["n12"]["results"] == []
    assert verdicts["n13"]["trusted"] is True
    assert store.get_run("n11").status == "untrusted"
    assert store.get_run("n11").declarations[0]["night_mean_k"] == 3.5


def test_all_results_lists_the_failing_night_after_its_steps(store):
    _fill(store, NIGHT)
    verdict = evaluate(store, "n11", all_results=True, record=False)
    assert [r["step"] for r in verdict["results"]] == [0, 1, 2, 3, None]
    assert [r["status"] for r in verdict["results"]] == ["PASS"] * 4 + ["FAIL"]


def test_without_the_option_the_same_nights_pass(store):
    verdicts = _fill(store, PLAIN)
    assert all(v["trusted"] for v in verdicts.values())
    assert "night_mean_k" not in store.get_run("n1").declarations[0]  # default declarations are stored as before


def test_replay_with_the_option_on_nights_stored_without_it(store):
    _fill(store, PLAIN)
    report = replay(store, IDENTITY.series, IDENTITY.backend, IDENTITY.suite, declarations=[NIGHT])
    [gate] = report["declarations"]
    assert gate["night_mean_k"] == 3.5
    assert [f["run_id"] for f in gate["failed"]] == ["n11"]
    [night] = gate["failed"][0]["results"]
    assert (night["bound"], night["step"], night["current"]) == ("night_mean", None, pytest.approx(4.0))
    assert report["summary"]["newly_failing"] == ["n11"]


def test_stored_night_declarations_replay_to_their_stored_statuses(store):
    _fill(store, NIGHT)
    report = replay(store, IDENTITY.series, IDENTITY.backend, IDENTITY.suite)
    assert all(n["stored_status"] == n["replayed_status"] for n in report["nights"])
    assert [f["run_id"] for f in report["declarations"][0]["failed"]] == ["n11"]
    assert report["summary"]["newly_failing"] == [] and report["summary"]["no_longer_failing"] == []


def test_a_failing_night_is_never_tolerated_by_min_failing_steps(store):
    both = declare("loss", steps=STEPS, constraint=WIDE, night_mean_k=3.5, min_failing_steps=2)
    verdicts = _fill(store, both)
    assert [r for r, v in verdicts.items() if not v["trusted"]] == ["n11"]
    report = replay(store, IDENTITY.series, IDENTITY.backend, IDENTITY.suite)
    assert [f["run_id"] for f in report["declarations"][0]["failed"]] == ["n11"]
