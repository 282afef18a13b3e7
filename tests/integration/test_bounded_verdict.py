"""A night that mostly fails keeps only the results its verdict can show, and reports what a whole list would.

The verdict lists at most ``max_results`` FAILs and ERRORs, worst first, and summarizes every
declaration from all its results; evaluate keeps of each declaration only what that needs
(``judging.KeptResults``).  Each verdict here is compared with the one built from every result
(``max_results=None``), cut as the contract cuts it.
"""

from __future__ import annotations

import math
from datetime import datetime, timedelta, timezone

import pytest

from airflow_metric_gate import judging
from airflow_metric_gate.declarations import declare
from airflow_metric_gate.pipeline import RunInfo, SeriesIdentity, evaluate, history, persist
from airflow_metric_gate.selection import Selection

T0 = datetime(2026, 5, 1, tzinfo=timezone.utc)
BAND = {"rel_up": 0.1, "abs_floor_up": 0.0, "rel_down": 0.1, "abs_floor_down": 0.0}
STEPS = 400


def _declarations():
    return [
        declare("m/up", steps="all", constraint=BAND),  # FAILs above, distances rising and tied
        declare("m/both", steps="all", constraint=BAND),  # FAILs on both sides, worst in the middle
        declare("m/few", steps="all", constraint=BAND, min_failing_steps=3),  # 2 FAILs: tolerated
        declare("m/many", steps="all", constraint=BAND, min_failing_steps=3),  # not tolerated
        declare("m/absent", steps="all", constraint=BAND),  # selects nothing on the last night: ERROR
        declare("m/warn", steps="all", constraint=BAND, severity="warn"),  # fails, never blocks
    ]


def _value(metric, step, failing):
    if not failing:
        return 1.0
    if metric == "m/up":
        return 2.0 + (step // 7) * 0.01  # ties of seven steps each
    if metric == "m/both":
        return 0.5 if step % 2 else 1.5 + (0.3 if step == 211 else 0.0)
    if metric == "m/few":
        return 3.0 if step in (5, 300) else 1.0
    if metric == "m/many":
        return 0.2 if step >= 100 else 1.0
    return 1.0 + 0.5 * (step % 3)  # m/warn


def _selections(failing):
    out = []
    for d in _declarations():
        if d.metric_key == "m/absent" and failing:
            out.append(Selection(d, error="metric m/absent not found in the record"))
            continue
        out.append(Selection(d, points=[(s, _value(d.metric_key, s, failing), s) for s in range(STEPS)]))
    return out


@pytest.fixture
def night(store):
    identity = SeriesIdentity("bounded")
    for n in range(3):
        run = RunInfo(f"bounded-n{n}", "baseline", T0 + timedelta(days=n))
        persist(store, identity, run, _selections(False))
        evaluate(store, run.run_id)
    last = RunInfo("bounded-last", "baseline", T0 + timedelta(days=3))
    persist(store, identity, last, _selections(True))
    return last.run_id


def _count_kept(monkeypatch):
    """Record how many results each ``KeptResults`` hands back; returns the list it fills."""
    kept_sizes = []
    items = judging.KeptResults.items

    def counted(self):
        found = items(self)
        kept_sizes.append(len(found))
        return found

    monkeypatch.setattr(judging.KeptResults, "items", counted)
    return kept_sizes


@pytest.mark.parametrize("max_results", [0, 1, 5, 37])
def test_a_bounded_verdict_is_the_whole_verdict_cut(store, night, max_results, monkeypatch):
    kept_sizes = _count_kept(monkeypatch)
    whole = evaluate(store, night, max_results=None, record=False, enforce=True)
    assert kept_sizes == []  # nothing bounded without a limit
    bounded = evaluate(store, night, max_results=max_results, record=False, enforce=True)
    failing = whole["counts"]["FAIL"] + whole["counts"]["ERROR"]
    assert failing == len(whole["results"]) > 1000 and whole["truncated"] == 0
    assert bounded == {**whole, "results": whole["results"][:max_results], "truncated": failing - max_results}
    # what was held: about max_results per declaration, a few more that set its summary, not every FAIL
    assert len(kept_sizes) == 1 and kept_sizes[0] <= len(_declarations()) * (max(max_results, 3) + 5)
    tolerated = next(e for e in whole["summary"] if e["metric_key"] == "m/many")
    assert tolerated["counts"]["FAIL"] == 300 and not any(e["metric_key"] == "m/few" for e in whole["summary"])
    assert whole["blocking"] == failing - next(e for e in whole["summary"] if e["metric_key"] == "m/warn")[
        "counts"]["FAIL"]


def test_a_bounded_verdict_within_a_byte_limit_counts_every_result_left_out(store, night):
    whole = evaluate(store, night, max_results=None, record=False)
    bounded = evaluate(store, night, max_results=200, max_bytes=20_000, record=False)
    shown = len(bounded["results"])
    assert 0 < shown < 200
    assert bounded == {**whole, "results": whole["results"][:shown],
                       "truncated": whole["counts"]["FAIL"] + whole["counts"]["ERROR"] - shown}


# -- the calibrated policy: a night that fails at most steps of several declarations ---------------

CALIBRATED_NIGHTS = 8


def _calibrated_declarations():
    return [
        declare("c/loss", steps="all", constraint=BAND, policy="calibrated", direction="up"),
        declare("c/reward", steps="all", constraint=BAND, policy="calibrated", direction="down"),
        declare("c/kl", steps="all", constraint=BAND, policy="calibrated", direction="both"),
        declare("c/absent", steps="all", constraint=BAND, policy="calibrated"),  # ERROR on the last night
        declare("c/warn", steps="all", constraint=BAND, policy="calibrated", direction="up", severity="warn"),
        declare("c/blowup", steps="all", constraint=BAND, policy="calibrated", direction="up"),
    ]


def _calibrated_value(metric, step, night, failing):
    noise = 1.0 + 0.02 * math.sin(step * 12.9898 + night * 78.233) + 0.01 * ((step * 7 + night * 3) % 5 - 2)
    if not failing:
        return noise
    if metric == "c/loss":
        return noise * (2.0 + (step // 9) * 0.01)  # every step far above, ties of nine steps
    if metric == "c/reward":
        return noise * (0.3 if step % 3 else 0.9)  # two steps in three far below
    if metric == "c/kl":
        return noise * (4.0 if step % 2 else 0.25)  # both sides
    if metric == "c/blowup":
        return noise * (50.0 if step % 4 else 1.0)  # three steps in four blow up
    return noise * 1.8  # c/warn


def _calibrated_selections(night, failing):
    out = []
    for d in _calibrated_declarations():
        if d.metric_key == "c/absent" and failing:
            out.append(Selection(d, error="metric c/absent not found in the record"))
            continue
        steps = range(STEPS - 40) if d.metric_key == "c/reward" and failing else range(STEPS)  # steps missing
        out.append(Selection(d, points=[(s, _calibrated_value(d.metric_key, s, night, failing), s) for s in steps]))
    return out


@pytest.fixture
def calibrated_night(store):
    identity = SeriesIdentity("bounded-calibrated")
    for n in range(CALIBRATED_NIGHTS):
        run = RunInfo(f"cal-n{n}", "baseline", T0 + timedelta(days=n))
        persist(store, identity, run, _calibrated_selections(n, False))
        assert evaluate(store, run.run_id)["trusted"]
    last = RunInfo("cal-last", "baseline", T0 + timedelta(days=CALIBRATED_NIGHTS))
    persist(store, identity, last, _calibrated_selections(CALIBRATED_NIGHTS, True))
    return last.run_id


@pytest.mark.parametrize("max_results", [0, 1, 5, 37])
def test_a_bounded_calibrated_verdict_is_the_whole_verdict_cut(store, calibrated_night, max_results, monkeypatch):
    kept_sizes = _count_kept(monkeypatch)
    held = []  # the results each declaration's judgement holds for the verdict
    judge = history.judge_calibrated

    def holding(*args, **kwargs):
        part = judge(*args, **kwargs)
        held.append(len(part.judgement.results))
        return part

    monkeypatch.setattr(history, "judge_calibrated", holding)
    whole = evaluate(store, calibrated_night, max_results=None, record=False, enforce=True)
    assert kept_sizes == [] and sum(held) > 1000
    held.clear()
    bounded = evaluate(store, calibrated_night, max_results=max_results, record=False, enforce=True)
    assert sum(held) <= 6 * (max(max_results, 1) * 2 + 5) + 6  # and a night result each
    failing = whole["counts"]["FAIL"] + whole["counts"]["ERROR"]
    assert failing > 1000 and whole["truncated"] == 0
    assert {e["metric_key"] for e in whole["summary"]} == {"c/loss", "c/reward", "c/kl", "c/absent", "c/warn",
                                                           "c/blowup"}
    assert [b["metric_key"] for b in whole["blowups"]] == ["c/blowup"]
    assert bounded == {**whole, "results": whole["results"][:max_results], "truncated": failing - max_results}
    # held: about max_results step results per declaration and the few that set its summary, not every FAIL
    assert len(kept_sizes) == 6  # one per declaration, judged one at a time
    assert sum(kept_sizes) <= 6 * (max(max_results, 1) * 2 + 5)
    assert 0 < whole["blocking"] < failing  # c/warn fails without blocking
