"""The mean is exact and order-independent: the same history gives the same verdict on every store.

The data sits on band edges: each current value is exactly the ``hi`` of the band around the
correctly summed mean, so a mean that is one ulp off (what a sum in scan order gives) turns a PASS
into a FAIL.
"""

from __future__ import annotations

import json
import math
import random
from datetime import datetime, timedelta, timezone

import pytest

from airflow_metric_gate.declarations import declare
from airflow_metric_gate.evaluation import band_limits, constraint_params
from airflow_metric_gate.pipeline import RunInfo, SeriesIdentity, evaluate, persist
from airflow_metric_gate.selection import Selection
from airflow_metric_gate.store import open_store

T0 = datetime(2026, 11, 1, tzinfo=timezone.utc)
IDENTITY = SeriesIdentity("rl-7b", "cuda", "nightly")
CONSTRAINT = {"abs_floor_up": 0.01, "abs_floor_down": 0.01}
STEPS = 200
NIGHTS = 7


def _persist(store, run_id, day, values, *, status=None, constraint=CONSTRAINT):
    declaration = declare("rollout/raw_reward", steps="all", constraint=constraint)
    selection = Selection(declaration, points=[(s, v, s) for s, v in enumerate(values)])
    persist(store, IDENTITY, RunInfo(run_id, "baseline", T0 + timedelta(days=day)), [selection])
    if status:
        store.set_status(run_id, status)


def _edge_history(seed=8):
    """Baseline values per night, and the current values sitting exactly on each band's hi."""
    rng = random.Random(seed)
    nights = [[rng.uniform(0.1, 1.0) * 10 ** rng.randint(-3, 3) for _ in range(STEPS)] for _ in range(NIGHTS)]
    params = constraint_params(CONSTRAINT)
    current = []
    for s in range(STEPS):
        ref = math.fsum(night[s] for night in nights) / NIGHTS
        current.append(band_limits(ref, params)[1])
    return nights, current


def _scan_order_differs(nights, current):
    """How many coordinates a left-to-right sum (newest night first) would push off the band."""
    params = constraint_params(CONSTRAINT)
    off = 0
    for s in range(STEPS):
        total = 0.0
        for night in reversed(nights):
            total += night[s]
        if not band_limits(total / NIGHTS, params)[1] >= current[s]:
            off += 1
    return off


@pytest.mark.parametrize("aggregate", ["mean", "median"])
def test_band_edge_values_pass_on_every_store(store_url, aggregate):
    nights, current = _edge_history()
    assert _scan_order_differs(nights, current) > 10  # the data does exercise the order of summation
    with open_store(store_url) as store:
        for day, values in enumerate(nights):
            _persist(store, f"night-{day}", day, values, status="trusted")
        _persist(store, "tonight", NIGHTS, current)
        verdict = evaluate(store, "tonight", aggregate=aggregate, all_results=True, max_results=None)
        again = evaluate(store, "tonight", aggregate=aggregate, all_results=True, max_results=None, record=False)
    if aggregate == "mean":
        assert verdict["counts"] == {"PASS": STEPS, "FAIL": 0, "INACTIVE": 0, "ERROR": 0}
        assert [r["ref"] for r in verdict["results"]] == [
            math.fsum(night[s] for night in nights) / NIGHTS for s in range(STEPS)
        ]
    assert again == verdict


def test_same_history_in_any_write_order_gives_the_same_verdict(store_url):
    nights, current = _edge_history(seed=9)
    verdicts = []
    for order in (range(NIGHTS), reversed(range(NIGHTS))):
        with open_store(store_url) as store:
            for day in order:
                _persist(store, f"night-{day}", day, nights[day], status="trusted")
            _persist(store, "tonight", NIGHTS, current)
            verdicts.append(evaluate(store, "tonight", all_results=True, max_results=None, record=False))
    assert verdicts[0] == verdicts[1]
    assert verdicts[0]["counts"]["PASS"] == STEPS


def test_baseline_sum_overflow_is_an_error_with_a_reason_not_nan(store_url):
    with open_store(store_url) as store:
        for day in range(3):
            _persist(store, f"night-{day}", day, [1.5e308, 1.0], status="trusted")
        _persist(store, "tonight", 3, [1.5e308, 1.0])
        verdict = evaluate(store, "tonight", all_results=True)
        status = store.get_run("tonight").status
    assert verdict["counts"] == {"PASS": 1, "FAIL": 0, "INACTIVE": 0, "ERROR": 1}
    error = verdict["results"][0]
    assert (error["status"], error["step"], error["ref"]) == ("ERROR", 0, None)
    assert "overflow" in error["reason"]
    assert status == "untrusted"
    json.dumps(verdict, allow_nan=False)


def test_band_beyond_the_float_range_is_null_in_strict_json(store_url):
    with open_store(store_url) as store:
        _persist(store, "night-0", 0, [1e308], status="trusted", constraint={"rel_up": 1.0, "rel_down": 0.5})
        _persist(store, "tonight", 1, [1.7e308], constraint={"rel_up": 1.0, "rel_down": 0.5})
        verdict = evaluate(store, "tonight", all_results=True)
    result = verdict["results"][0]
    assert result["status"] == "PASS"
    assert result["hi"] is None and result["lo"] == 1e308 / 2
    assert "hi is beyond the float range" in result["reason"]
    json.dumps(verdict, allow_nan=False)
