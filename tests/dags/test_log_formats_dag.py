"""examples/{tensorboard,csv,mlflow}_nightly.py: the metric_gate task group on each log format, on both stores.

Each test runs four nights of one example DAG with dag.test(): three clean baseline nights, then a regressed night whose
``evaluate_gate`` fails.  The sensor waits deferred (its trigger runs in line under dag.test()).
"""

from __future__ import annotations

import shutil
import uuid
from pathlib import Path

import pytest
from _gate_data import store_query
from _log_writers import (
    log_mlflow_night,
    night_points,
    write_lightning_csv,
    write_tensorboard_night,
)

pytestmark = pytest.mark.airflow_db

NIGHTS = ("2026-11-01", "2026-11-02", "2026-11-03", "2026-11-04")
REWARDS = (0.8, 0.81, 0.82, 0.4)  # the last night regresses

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def store_url(request, tmp_path):
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'metric_gate.db'}"
    return request.getfixturevalue("pg_url")


def _run_nights(airflow_env, store_url, example, dag_id, conf):
    """Run an example DAG (copied into the scratch bundle) as baseline for every night, in order."""
    dag_file = airflow_env.scratch_dags / example
    shutil.copy(EXAMPLES / example, dag_file)
    return airflow_env.dag_tests(
        [{"dag_id": dag_id, "dag_file": dag_file, "logical_date": f"{night}T00:00:00+00:00",
          "conf": {**conf, "role": "baseline"}} for night in NIGHTS],
        env={"AIRFLOW_CONN_METRIC_GATE_DB": store_url},
        timeout=1200,
    )


def _check(results, store_url, points=8):
    for night, result in zip(NIGHTS[:-1], results):
        assert result.state == "success", (night, result.output[-6000:])
        assert result.xcom["metric_gate.evaluate_gate"]["trusted"] is True
    last = results[-1]
    assert last.state == "failed", last.output[-6000:]
    assert last.task_state("metric_gate.evaluate_gate") == "failed"
    verdict = last.xcom["metric_gate.evaluate_gate"]
    assert verdict["trusted"] is False
    failing = {(r["metric_key"], r["side"]) for r in verdict["results"] if r["status"] == "FAIL"}
    assert failing == {("rollout/raw_reward", "below")}, verdict["results"]
    # the examples use the calibrated policy: every step of the reward fails against the 3 nights before
    steps = sorted((r["step"], r["n"]) for r in verdict["results"] if r["status"] == "FAIL" and r["step"] is not None)
    assert steps == [(0, 3), (1, 3), (2, 3), (3, 3)]
    assert last.xcom["metric_gate.ingest_record"]["points"] == points
    if store_url.startswith("sqlite"):
        import sqlite3

        with sqlite3.connect(store_url.removeprefix("sqlite:///")) as db:
            rows = db.execute("SELECT status, COUNT(*) FROM runs GROUP BY status ORDER BY status").fetchall()
    else:
        rows = store_query(store_url, "SELECT status, COUNT(*) FROM runs GROUP BY status ORDER BY status")
    assert [tuple(r) for r in rows] == [("trusted", 3), ("untrusted", 1)]


def test_tensorboard_nights(airflow_env, tmp_path, store_url):
    pytest.importorskip("tensorboardX")
    root = tmp_path / "runs"
    for night, reward in zip(NIGHTS, REWARDS):
        folder = root / night
        folder.mkdir(parents=True)
        write_tensorboard_night(folder, night_points(reward))
    results = _run_nights(airflow_env, store_url, "tensorboard_nightly.py", "gate_tensorboard_nightly",
                          {"log_root": str(root)})
    _check(results, store_url)


def test_csv_nights(airflow_env, tmp_path, store_url):
    root = tmp_path / "lightning_logs"
    for night, reward in zip(NIGHTS, REWARDS):
        write_lightning_csv(root / night / "metrics.csv", night_points(reward))
        (root / night / "_SUCCESS").touch()
    results = _run_nights(airflow_env, store_url, "csv_nightly.py", "gate_csv_nightly", {"log_root": str(root)})
    _check(results, store_url, points=12)  # the epoch column is a metric too


def test_mlflow_nights(airflow_env, tmp_path, store_url, mlflow_server):
    client = mlflow_server.client()
    experiment = f"nightly-{uuid.uuid4().hex[:8]}"
    for night, reward in zip(NIGHTS, REWARDS):
        log_mlflow_night(client, experiment, night_points(reward), tags={"night": night})
    results = _run_nights(airflow_env, store_url, "mlflow_nightly.py", "gate_mlflow_nightly",
                          {"experiment": experiment, "tracking_uri": mlflow_server.uri})
    _check(results, store_url)
    assert results[0].xcom["metric_gate.wait_for_record"].startswith("runs:/")
