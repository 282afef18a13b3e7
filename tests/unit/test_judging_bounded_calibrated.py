"""The calibrated judgement keeps only what a verdict can show, and that verdict is the whole one cut.

``judge_declaration`` is replaced by made-up decisions, so that ties of distance between a step's
FAIL and a night result, improvements, and several declarations come in every arrangement.
"""

from __future__ import annotations

import random

import pytest

from airflow_metric_gate import judging
from airflow_metric_gate.decision.calibrated import Decision
from airflow_metric_gate.enums import ERROR, FAIL, PASS
from airflow_metric_gate.evaluation import Result
from airflow_metric_gate.verdict import VerdictHeader, VerdictOptions, build_verdict

HEADER = VerdictHeader("s", "cuda", "nightly", "r", "baseline", "2026-11-01T00:00:00+00:00", False, False, 0)


def _gate(key):
    return {"metric_key": key[0], "steps_key": key[1], "constraint_key": key[2], "allowlist_reason": None,
            "enforce": False}


def _verdicts(monkeypatch, decisions, values, errors=(), max_results=1):
    monkeypatch.setattr(judging, "judge_declaration", lambda key, *a, **k: decisions[key])
    gates = {key: _gate(key) for key in values}
    out = []
    for keep in (None, max_results):
        judgement = judging.judge_calibrated(values, gates, list(errors), {key: None for key in gates}, run_id="r",
                                             logical_date="2026-11-01", min_history=1, keep=keep).judgement
        listed = None if keep is None else judgement.counts[FAIL] + judgement.counts[ERROR]
        out.append(build_verdict(HEADER, [r for _, r, _ in judgement.results], VerdictOptions(
            max_results=keep, counts=judgement.counts, declaration_counts=judgement.per_declaration, listed=listed)))
    whole, bounded = out
    failing = whole["counts"][FAIL] + whole["counts"][ERROR]
    shown = min(max_results, len(whole["results"]))
    return whole, bounded, {**whole, "results": whole["results"][:shown], "truncated": failing - shown}


def test_a_night_result_tied_with_the_last_steps_fail_comes_after_it_as_in_the_whole_list(monkeypatch):
    key = ("m", '"all"', "{}")
    results = [Result(*key, 0, 0, PASS, current=1.0, ref=1.0, n=5, lo=0.5, hi=1.5),
               Result(*key, 2, 2, FAIL, current=2.0, ref=1.0, n=5, lo=0.0, hi=1.5, side="above", bound="calibrated"),
               Result(*key, None, None, FAIL, current=1.5, ref=0.0, n=5, lo=-1.0, hi=1.0, side="above",
                      bound="night", reason="night")]  # its distance (1.5 - 1) / 1 ties the step's (2 - 1.5) / 1
    whole, bounded, cut = _verdicts(monkeypatch, {key: Decision("fail", results, {"o": "fail"}, {})},
                                    {key: [(0, 0, 1.0, 10), (2, 2, 2.0, 11)]})
    assert [r["step"] for r in whole["results"]] == [2, None]
    assert bounded == cut


@pytest.mark.parametrize("seed", range(300))
def test_random_nights_give_the_whole_verdict_cut(monkeypatch, seed):
    rng = random.Random(seed)
    decisions, values, errors, order = {}, {}, [], 0
    for d in range(rng.randint(1, 3)):
        key = (f"m{d}", '"all"', "{}")
        if rng.random() < 0.1:  # a selection error: no values
            errors.append((key, order, "metric not found"))
            values[key] = []
            order += 1
            continue
        rows, results = [], []
        for i in range(rng.randint(1, 8)):
            step = i * 10
            rows.append((step, step, 1.0, order))
            order += 1
            if rng.random() < 0.5:
                side = rng.choice(["above", "below"])
                current = rng.choice([2.0, 2.5, 3.0]) if side == "above" else rng.choice([-2.0, -1.0, 0.0])
                results.append(Result(*key, step, step, FAIL, current=current, ref=1.0, n=5, lo=0.5, hi=1.5,
                                      side=side, bound=rng.choice(["calibrated", "blowup", None])))
            else:
                results.append(Result(*key, step, step, PASS, current=1.0, ref=1.0, n=5, lo=0.5, hi=1.5))
        outcome = "pass"
        if rng.random() < 0.4:
            results.append(Result(*key, None, None, FAIL, current=rng.choice([1.5, 2.0, 3.0]), ref=0.0, n=5,
                                  lo=-1.0, hi=1.0, side="above", bound="night", reason="night"))
            outcome = "fail"
        elif rng.random() < 0.3:
            results.append(Result(*key, None, None, PASS, current=1.5, ref=0.0, n=5, lo=-1.0, hi=1.0,
                                  bound="improvement", reason="better"))
        decisions[key] = Decision(outcome, results, {"o": outcome}, {})
        values[key] = rows
    _, bounded, cut = _verdicts(monkeypatch, decisions, values, errors, max_results=rng.randint(0, 4))
    assert bounded == cut
