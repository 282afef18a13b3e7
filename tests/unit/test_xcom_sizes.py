"""The XCom payloads documented in docs/airflow/xcom.md stay small whatever the record's size."""

from __future__ import annotations

import json
import random

import pytest

from airflow_metric_gate.declarations import declare
from airflow_metric_gate.evaluation import FAIL, Result
from airflow_metric_gate.operators.select import selection_reference
from airflow_metric_gate.pipeline import payload_to_selection, selection_to_payload
from airflow_metric_gate.selection import Selection
from airflow_metric_gate.verdict import XCOM_MAX_BYTES, VerdictHeader, VerdictOptions, build_verdict

# These tests decode the values inline (the deprecated version 1 selection).
pytestmark = [
    pytest.mark.filterwarnings("ignore:a selection with its values inline:DeprecationWarning"),
    pytest.mark.slow,  # verdicts of many thousands of results: 16 s in all
]

C = {"rel_up": 0.5, "abs_floor_up": 0.05, "rel_down": 0.2, "abs_floor_down": 0.05}


def _size(obj) -> int:
    return len(json.dumps(obj).encode())


def _reference(declarations: int, points: int) -> dict:
    gates = [declare(f"train/metric_{i:03d}", steps="all", constraint=C) for i in range(declarations)]
    counts = {"metrics": declarations, "points": points, "files": 8, "skipped": 1}
    return selection_reference(location="s3://bucket/nightly/2026-11-30", format="series", checksum="0" * 64,
                               declarations=gates, counts=counts)


def test_select_reference_does_not_grow_with_the_record():
    assert _size(_reference(10, 100_000_000)) - _size(_reference(10, 1_000)) <= 6  # the count's digits


def test_select_reference_is_a_few_hundred_bytes_per_declaration():
    per_declaration = (_size(_reference(51, 1)) - _size(_reference(1, 1))) / 50
    assert 100 < per_declaration < 400
    assert _size(_reference(10, 100_000)) < 4_500


def test_inline_selection_still_round_trips_exactly():
    # a selection with values, for PersistValuesOperator used without a record
    rng = random.Random(7)
    points = [(step, rng.random(), step) for step in range(500)]
    selections = [Selection(declare("rollout/raw_reward", steps="all", constraint=C), points=points)]
    decoded = payload_to_selection(json.loads(json.dumps(selection_to_payload(selections))))
    assert decoded[0].points == selections[0].points
    assert decoded[0].declaration == selections[0].declaration


def test_verdict_is_capped_whatever_the_run_size():
    results = [
        Result("rollout/raw_reward", '"all"', '{"rel_up":0.5}', s, s, FAIL, current=0.1, ref=0.8, n=20, lo=0.64,
               hi=1.2, side="below", bound="rel", reason="0.1 is below lo 0.64 (ref 0.8 - rel 0.2 x |ref| = 0.16)")
        for s in range(100_000)
    ]
    header = VerdictHeader(series="s", backend="cuda", suite="x", run_id="r", role="baseline",
                           logical_date="2026-11-30T00:00:00+00:00", trusted=False, enforced=True, blocking=100_000)
    verdict = build_verdict(header, results, VerdictOptions(max_bytes=XCOM_MAX_BYTES))
    assert _size(verdict) <= XCOM_MAX_BYTES < 64 * 1024
    assert verdict["counts"]["FAIL"] == 100_000
    assert len(verdict["results"]) + verdict["truncated"] == 100_000
    assert 0 < len(verdict["results"]) <= 200
