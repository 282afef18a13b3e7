"""dags/nightly_metric_gate.py end to end, under ``dag.test()`` and ``airflow dags test``.

The store is the embedded SQLite store behind an Airflow connection (``metric_gate_db``), so these
tests need no server; the Postgres path of the operators is covered by the integration tests.
"""

from __future__ import annotations

import json
import re
import sqlite3

import pytest

pytestmark = pytest.mark.airflow_db

DAG_ID = "nightly_metric_gate"
SERIES = "rl-dagtest"
GOOD = {"train/grad_norm": 1.0, "train/ppo_kl": 0.05, "rollout/raw_reward": 0.8}


def _write_night(root, day: str, *, reward: float = 0.8) -> None:
    """One record directory per night: two training processes (steps 0-3 split between them)."""
    night = root / day
    night.mkdir(parents=True)
    values = {**GOOD, "rollout/raw_reward": reward}
    for rank in range(2):
        steps = range(rank, 4, 2)
        lines = [{"metric": m, "series": [[s, v] for s in steps]} for m, v in values.items()]
        lines.append({"metric": "rollout/tito_session_mismatch_rate/v1/assistant_text", "series": [[3, 0.01]]})
        (night / f"rank{rank}.jsonl").write_text("".join(json.dumps(line) + "\n" for line in lines))
    (night / "_SUCCESS").touch()


@pytest.fixture
def nights(tmp_path):
    root = tmp_path / "records"
    for day in ("2026-11-01", "2026-11-02", "2026-11-03"):
        _write_night(root, day)
    _write_night(root, "2026-11-04", reward=0.4)  # raw_reward halves: below the band's lower edge
    db = tmp_path / "metric_gate.db"
    return root, db, {"AIRFLOW_CONN_METRIC_GATE_DB": f"sqlite:///{db}"}


def _conf(root, **extra):
    return {"record_root": str(root), "series": SERIES, **extra}


def _run(airflow_env, nights, day, **conf):
    root, _, env = nights
    return airflow_env.dag_test(DAG_ID, conf=_conf(root, **conf), logical_date=f"{day}T00:00:00+00:00", env=env)


def _rows(db, run_id):
    with sqlite3.connect(db) as conn:
        return conn.execute("SELECT COUNT(*) FROM metric_values WHERE run_id = ?", (run_id,)).fetchone()[0]


def test_baseline_nights_pass_then_a_regression_fails_loudly(airflow_env, nights):
    _, db, _ = nights
    for day in ("2026-11-01", "2026-11-02", "2026-11-03"):
        result = _run(airflow_env, nights, day, role="baseline")
        assert result.state == "success", result.output[-6000:]
        verdict = result.xcom["evaluate_gate"]
        assert verdict["trusted"] is True and verdict["role"] == "baseline"
        json.dumps(result.xcom)

    first = result.xcom["persist_values"]
    assert first["rows"] == 13  # 4 grad_norm + 4 ppo_kl + 4 raw_reward + 1 TITO "last"
    assert _rows(db, first["run_id"]) == 13

    result = _run(airflow_env, nights, "2026-11-04", role="baseline")

    assert result.state == "failed"
    assert result.task_state("evaluate_gate") == "failed"
    assert result.tasks["evaluate_gate"]["try_number"] == 1  # a regression is not retried
    assert result.task_state("persist_values") == "success"
    verdict = result.xcom["evaluate_gate"]  # pushed before the task failed
    assert verdict["schema"] == "airflow-metric-gate/verdict/v1"
    assert verdict["trusted"] is False and verdict["counts"]["FAIL"] == 4
    assert {r["metric_key"] for r in verdict["results"]} == {"rollout/raw_reward"}
    assert len(json.dumps(verdict)) < 64 * 1024
    summary = f"metric-gate: {SERIES} run {verdict['run_id']}: NOT-TRUSTED (13 results, 4 fail, 0 error)"
    assert summary in result.output
    assert "AirflowFailException" in result.output
    assert re.search(r"FAIL rollout/raw_reward step \d: .*below", result.output)
    assert "Full verdict: XCom return_value of task evaluate_gate" in result.output


def test_manual_run_is_shadow_and_reports_without_failing(airflow_env, nights):
    for day in ("2026-11-01", "2026-11-02"):
        assert _run(airflow_env, nights, day, role="baseline").state == "success"

    result = _run(airflow_env, nights, "2026-11-04")  # role "auto": dag.test makes a manual run

    assert result.run_type == "manual"
    assert result.state == "success", result.output[-6000:]
    verdict = result.xcom["evaluate_gate"]
    assert verdict["role"] == "shadow"
    assert verdict["trusted"] is False
    assert "NOT-TRUSTED" in result.output
    assert "Shadow run" in result.output


def test_missing_metric_is_an_error_result_not_a_crash(airflow_env, nights, tmp_path):
    root, _, env = nights
    night = root / "2026-11-05"
    night.mkdir()
    (night / "rank0.jsonl").write_text(json.dumps({"metric": "train/grad_norm", "series": [[0, 1.0]]}) + "\n")
    (night / "_SUCCESS").touch()

    result = _run(airflow_env, nights, "2026-11-05", role="baseline")

    assert result.task_state("select_steps") == "success"
    assert result.task_state("evaluate_gate") == "failed"
    verdict = result.xcom["evaluate_gate"]
    assert verdict["counts"]["ERROR"] == 3
    assert any("rollout/raw_reward" in r["metric_key"] and r["status"] == "ERROR" for r in verdict["results"])


def test_malformed_record_fails_ingest_without_retry_and_stores_nothing(airflow_env, nights):
    root, db, _ = nights
    night = root / "2026-11-06"
    night.mkdir()
    (night / "rank0.jsonl").write_text('{"metric": "train/grad_norm", "series": [[0, 1.0]]}\nnot json\n')
    (night / "_SUCCESS").touch()

    result = _run(airflow_env, nights, "2026-11-06", role="baseline")

    assert result.task_state("ingest_record") == "failed"
    assert result.tasks["ingest_record"]["try_number"] == 1
    assert result.task_state("evaluate_gate") == "upstream_failed"
    assert "rank0.jsonl:2" in result.output
    assert not db.exists()  # the store was never opened


def test_airflow_dags_test_command(airflow_env, nights):
    root, _, env = nights
    proc = airflow_env.airflow(
        "dags", "test", DAG_ID, "2026-11-01", "--conf", json.dumps(_conf(root, role="baseline")), env=env
    )
    assert proc.returncode == 0, proc.stdout[-6000:]
    result = airflow_env.inspect(DAG_ID)
    assert result.state == "success"
    assert result.xcom["wait_for_record"] == str(root / "2026-11-01")
    assert result.xcom["evaluate_gate"]["trusted"] is True
    assert f"metric-gate: {SERIES} run " in proc.stdout
