"""A verdict kept where Airflow keeps XCom values: a PostgreSQL ``jsonb`` column.

``jsonb`` keeps a number as an exact numeric and gives it back without an exponent, so a float of
1e20 or more comes back as an integer beyond 64 bits, which the Airflow task runner cannot send to
a task (``can't serialize ints < -2**63 or > 2**64 - 1``): a task pulling such a verdict fails.
Every number a verdict carries must come back from ``jsonb`` within 64 bits.
"""

from __future__ import annotations

import json
import math

import psycopg2
import pytest

from airflow_metric_gate import run_gate
from airflow_metric_gate.verdict import XCOM_NUMBER_MAX, for_xcom

pytestmark = pytest.mark.postgres

GATES = [
    {"metric_key": "rollout/raw_reward", "steps": "all", "constraint": {"rel_up": 0.2, "rel_down": 0.2}},
    {"metric_key": "train/grad_norm"},
    {"metric_key": "train/ppo_kl", "steps": "all",
     "constraint": {"abs_floor_up": 0.02, "rel_up": 0.0, "abs_floor_down": 0.02, "rel_down": 0.0}},
]


def _night(path, reward, kl=0.0, grad=1.0):
    lines = [{"metric": "rollout/raw_reward", "series": [[0, reward], [1, reward]]},
             {"metric": "train/grad_norm", "series": [[0, grad], [1, grad]]},
             {"metric": "train/ppo_kl", "series": [[0, kl], [1, kl]]}]
    path.write_text("".join(json.dumps(x) + "\n" for x in lines))
    return path


def _numbers(value, where="$"):
    if isinstance(value, bool) or value is None:
        return
    if isinstance(value, (int, float)):
        yield where, value
    elif isinstance(value, dict):
        for k, v in value.items():
            yield from _numbers(v, f"{where}.{k}")
    elif isinstance(value, list):
        for i, v in enumerate(value):
            yield from _numbers(v, f"{where}[{i}]")


@pytest.mark.parametrize("policy", ["calibrated", "reference"])
def test_every_number_of_a_failing_verdict_comes_back_from_jsonb_within_64_bits(tmp_path, pg_url, policy):
    """The calibrated prior band's night (no z), and a FAIL against a baseline of 0 (divisor 1e-12)."""
    store = f"sqlite:///{tmp_path / 's.db'}"
    run_gate(_night(tmp_path / "1.jsonl", 0.8), GATES, series="s", store=store, logical_date="2026-07-01",
             policy=policy)
    verdict = run_gate(_night(tmp_path / "2.jsonl", 0.4, kl=0.5), GATES, series="s", store=store,
                       logical_date="2026-07-02", policy=policy, enforce=True).to_dict()
    assert verdict["blocking"] > 0 and verdict["summary"], verdict["summary"]
    assert _too_big(pg_url, verdict) == []
    for where, n in _numbers(verdict):
        assert math.isfinite(n), where


def _too_big(pg_url, verdict):
    """The numbers of ``verdict`` that come back from ``jsonb`` as integers beyond 64 bits."""
    conn = psycopg2.connect(pg_url)
    try:
        with conn.cursor() as cur:
            cur.execute("SELECT %s::jsonb::text", (json.dumps(verdict),))
            back = json.loads(cur.fetchone()[0])
    finally:
        conn.close()
    return [(where, n) for where, n in _numbers(back) if isinstance(n, int) and not -2**63 <= n < 2**64]


def test_a_divergence_s_values_reach_xcom_within_64_bits_and_keep_their_value_in_the_reason(tmp_path, pg_url):
    """A grad norm of 1e25 (a blow-up): the verdict keeps it; the copy pushed to XCom holds 1e18."""
    store = f"sqlite:///{tmp_path / 's.db'}"
    run_gate(_night(tmp_path / "1.jsonl", 0.8), GATES, series="s", store=store, logical_date="2026-07-01",
             policy="calibrated")
    verdict = run_gate(_night(tmp_path / "2.jsonl", 0.8, grad=1e25), GATES, series="s", store=store,
                       logical_date="2026-07-02", policy="calibrated", enforce=True).to_dict()
    blown = [r for r in verdict["results"] if r["metric_key"] == "train/grad_norm" and r["current"] == 1e25]
    assert blown and "1e+25" in blown[0]["reason"], verdict["results"]
    assert _too_big(pg_url, verdict)  # as it is, the verdict could not reach a task through XCom
    pushed = for_xcom(verdict)
    assert _too_big(pg_url, pushed) == []
    [kept] = [r for r in pushed["results"] if r["metric_key"] == "train/grad_norm" and r["step"] == blown[0]["step"]
              and r["bound"] == blown[0]["bound"]]
    assert kept["current"] == XCOM_NUMBER_MAX and "1e+25" in kept["reason"]
    pairs = list(zip(_numbers(verdict), _numbers(pushed), strict=True))
    assert all(wa == wb for (wa, _), (wb, _) in pairs)  # the same shape, the same places
    moved = [(where, a, b) for (where, a), (_, b) in pairs if a != b]
    assert moved and all(abs(a) > XCOM_NUMBER_MAX and b == math.copysign(XCOM_NUMBER_MAX, a) for _, a, b in moved)
