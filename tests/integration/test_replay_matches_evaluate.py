"""Replay and evaluation judge a night the same way (one judging function), every option switched on."""

from __future__ import annotations

import random
from datetime import datetime, timedelta, timezone

import pytest

from airflow_metric_gate.declarations import declare
from airflow_metric_gate.pipeline import RunInfo, SeriesIdentity, evaluate, persist
from airflow_metric_gate.replay import replay
from airflow_metric_gate.selection import Selection

T0 = datetime(2026, 3, 1, tzinfo=timezone.utc)
IDENTITY = SeriesIdentity("random-job", "cuda", "nightly")
STEPS = list(range(8))
DECLARATIONS = [
    # every opt-in option at once
    declare("reward", steps=STEPS, constraint={"rel_up": 0.05, "rel_down": 0.05}, band="mad", mad_k=4.0,
            night_mean_k=3.0, min_failing_steps=2, severity="warn"),
    declare("grad_norm", steps=STEPS, constraint={"rel_up": 0.08, "abs_floor_down": 0.05}, band="mad",
            night_mean_k=2.5, min_failing_steps=3, enforce=True),
    declare("kl", steps=STEPS, constraint={"rel_up": 0.1, "rel_down": 0.1}, night_mean_k=2.0),
    declare("loss", steps=STEPS, constraint={"rel_up": 0.04, "rel_down": 0.04}, allowlist_reason="known flaky"),
]
LEVELS = {"reward": 5.0, "grad_norm": 1.5, "kl": 0.02, "loss": 2.0}


def _night(rng: random.Random, night: int) -> list[Selection]:
    selections = []
    for d in DECLARATIONS:
        if rng.random() < 0.02:  # the metric vanished from tonight's record
            selections.append(Selection(d, error=f"{d.metric_key} is not in the record"))
            continue
        # some nights, a level shift from some step on: small (for the whole-night rule) or large
        shift = rng.choice([0.0] * 24 + [0.015, -0.015] * 3 + [0.15, -0.3])
        start = rng.randrange(len(STEPS))
        points = []
        for step in STEPS:
            value = LEVELS[d.metric_key] * (1 + 0.01 * rng.gauss(0, 1) + 0.0002 * night)
            if step >= start:
                value *= 1 + shift
            if rng.random() < 0.01:  # an isolated spike
                value *= 1.5
            points.append((step, value, step))
        selections.append(Selection(d, points=points))
    return selections


@pytest.mark.parametrize("aggregate", ["mean", "median"])
def test_replay_gives_the_statuses_evaluation_gave(store, aggregate):
    rng = random.Random(20261201)
    verdicts = {}
    for night in range(50):
        run_id = f"night-{night:02d}"
        role = "shadow" if night % 11 == 10 else "baseline"
        persist(store, IDENTITY, RunInfo(run_id, role=role, logical_date=T0 + timedelta(days=night)),
                _night(rng, night))
        verdicts[run_id] = evaluate(store, run_id, history_limit=12, aggregate=aggregate, all_results=True,
                                    max_results=None)

    report = replay(store, IDENTITY.series, IDENTITY.backend, IDENTITY.suite, history_limit=12,
                    aggregate=aggregate)

    failed = {}  # (run_id, declaration) -> the statuses of its FAIL and ERROR results, by step
    for gate in report["declarations"]:
        for night in gate["failed"]:
            failed[night["run_id"], gate["metric_key"]] = [(r["step"], r["status"], r["bound"])
                                                          for r in night["results"]]
    assert len(report["nights"]) == len(verdicts)
    statuses_seen = set()
    for night in report["nights"]:
        verdict = verdicts[night["run_id"]]
        assert night["replayed_status"] == night["stored_status"] == ("trusted" if verdict["trusted"] else "untrusted")
        assert night["counts"] == {s: c for s, c in verdict["counts"].items() if c}
        statuses_seen.update(night["counts"])
        expected = {}
        for r in verdict["results"]:
            if r["status"] in ("FAIL", "ERROR"):
                expected.setdefault((night["run_id"], r["metric_key"]), []).append((r["step"], r["status"], r["bound"]))
        assert {k: v for k, v in failed.items() if k[0] == night["run_id"]} == expected
    # the series exercised what it is meant to: cold starts, passes, failures (whole-night ones too), errors
    assert statuses_seen == {"INACTIVE", "PASS", "FAIL", "ERROR"}
    assert any(bound == "night_mean" for results in failed.values() for _, _, bound in results)
    assert any(bound == "mad" for results in failed.values() for _, _, bound in results)
