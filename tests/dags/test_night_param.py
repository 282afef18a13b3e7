"""A night re-run by hand without a logical date (``airflow dags trigger``) is stored under its ``night`` param."""

from __future__ import annotations

import json
import sqlite3

import pytest

pytestmark = pytest.mark.airflow_db

DAG_ID = "nightly_metric_gate"
METRICS = {"train/grad_norm": 1.0, "train/ppo_kl": 0.05, "rollout/raw_reward": 0.8}


def _write_night(root, day: str) -> None:
    night = root / day
    night.mkdir(parents=True)
    lines = [{"metric": m, "series": [[s, v] for s in range(4)]} for m, v in METRICS.items()]
    lines.append({"metric": "rollout/tito_session_mismatch_rate/v1/assistant_text", "series": [[3, 0.01]]})
    (night / "rank0.jsonl").write_text("".join(json.dumps(line) + "\n" for line in lines))
    (night / "_SUCCESS").touch()


def test_baseline_run_without_logical_date_is_stored_under_its_night(airflow_env, tmp_path):
    root = tmp_path / "records"
    for day in ("2026-11-01", "2026-11-02", "2026-11-03"):
        _write_night(root, day)
    db = tmp_path / "metric_gate.db"
    conf = {"record_root": str(root), "series": "rl-night", "role": "baseline"}
    runs = [
        {"dag_id": DAG_ID, "conf": conf, "logical_date": "2026-11-01T00:00:00+00:00"},
        {"dag_id": DAG_ID, "conf": conf, "logical_date": "2026-11-03T00:00:00+00:00"},
        # the missed night, re-run by hand later: no logical date, the night as a param
        {"dag_id": DAG_ID, "conf": {**conf, "night": "2026-11-02"}, "logical_date": "none"},
    ]
    *_, missed = airflow_env.dag_tests(runs, env={"AIRFLOW_CONN_METRIC_GATE_DB": f"sqlite:///{db}"})

    assert missed.state == "success", missed.output[-6000:]
    assert missed.xcom["metric_gate.persist_values"]["logical_date"] == "2026-11-02T00:00:00+00:00"
    assert missed.xcom["metric_gate.evaluate_gate"]["logical_date"] == "2026-11-02T00:00:00+00:00"
    assert missed.xcom["metric_gate.evaluate_gate"]["role"] == "baseline"
    with sqlite3.connect(db) as conn:
        nights = [row[0][:10] for row in conn.execute("SELECT logical_date FROM runs ORDER BY logical_date")]
    assert nights == ["2026-11-01", "2026-11-02", "2026-11-03"]
