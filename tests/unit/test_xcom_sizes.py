"""The XCom payload sizes documented in docs/airflow/xcom.md hold."""

from __future__ import annotations

import json
import random

from airflow_metric_gate.declarations import declare
from airflow_metric_gate.evaluation import FAIL, Result
from airflow_metric_gate.pipeline import payload_to_selection, selection_to_payload
from airflow_metric_gate.selection import Selection
from airflow_metric_gate.verdict import XCOM_MAX_BYTES, build_verdict

C = {"rel_up": 0.5, "abs_floor_up": 0.05, "rel_down": 0.2, "abs_floor_down": 0.05}


def _selection(values: int, decimals: int | None = None) -> list[Selection]:
    rng = random.Random(7)
    points = []
    for step in range(values):
        value = rng.random()
        points.append((step, round(value, decimals) if decimals else value, step))
    return [Selection(declare("rollout/raw_reward", steps="all", constraint=C), points=points)]


def _size(obj) -> int:
    return len(json.dumps(obj).encode())


def test_selection_payload_grows_about_26_kb_per_thousand_values():
    per_thousand = (_size(selection_to_payload(_selection(11_000))) - _size(selection_to_payload(_selection(1_000))))
    per_thousand /= 10
    assert 20_000 < per_thousand <= 27_000
    short = (_size(selection_to_payload(_selection(11_000, 4))) - _size(selection_to_payload(_selection(1_000, 4))))
    assert short / 10 <= 14_000


def test_selection_payload_round_trips_exactly():
    selections = _selection(500)
    decoded = payload_to_selection(json.loads(json.dumps(selection_to_payload(selections))))
    assert decoded[0].points == selections[0].points
    assert decoded[0].declaration == selections[0].declaration


def test_verdict_is_capped_whatever_the_run_size():
    results = [
        Result("rollout/raw_reward", '"all"', '{"rel_up":0.5}', s, s, FAIL, current=0.1, ref=0.8, n=20, lo=0.64,
               hi=1.2, side="below", bound="rel", reason="0.1 is below lo 0.64 (ref 0.8 - rel 0.2 x |ref| = 0.16)")
        for s in range(100_000)
    ]
    verdict = build_verdict(series="s", backend="cuda", suite="x", run_id="r", role="baseline",
                            logical_date="2026-11-30T00:00:00+00:00", results=results, trusted=False,
                            enforced=True, blocking=100_000, max_bytes=XCOM_MAX_BYTES)
    assert _size(verdict) <= XCOM_MAX_BYTES < 64 * 1024
    assert verdict["counts"]["FAIL"] == 100_000
    assert len(verdict["results"]) + verdict["truncated"] == 100_000
    assert 0 < len(verdict["results"]) <= 200
