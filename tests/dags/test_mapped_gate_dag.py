"""The operators under dynamic task mapping: one store run per map index, XCom routed per index."""

from __future__ import annotations

import json
import sqlite3
import textwrap
import uuid

import pytest

pytestmark = pytest.mark.airflow_db

DAG_TEMPLATE = """
from __future__ import annotations

import pendulum

from airflow.sdk import DAG

from airflow_metric_gate.operators.evaluate import EvaluateGateOperator
from airflow_metric_gate.operators.persist import PersistValuesOperator
from airflow_metric_gate.operators.select import SelectStepsOperator

CONSTRAINT = {{"rel_up": 0.5, "rel_down": 0.2}}
GATES = [{{"metric_key": "rollout/raw_reward", "steps": "all", "constraint": CONSTRAINT}}]

with DAG(dag_id={dag_id!r}, schedule=None, start_date=pendulum.datetime(2026, 1, 1, tz="UTC"), catchup=False):
    select = SelectStepsOperator(task_id="select_steps", record={record!r}, gates=GATES)
    persist = PersistValuesOperator.partial(
        task_id="persist_values", selection=select.output, role="baseline"
    ).expand(series=["rl-a", "rl-b"])
    EvaluateGateOperator.partial(task_id="evaluate_gate", enforce=True).expand(run=persist.output)
"""


def test_each_map_index_is_its_own_store_run(airflow_env, tmp_path):
    record = tmp_path / "night.jsonl"
    record.write_text(json.dumps({"metric": "rollout/raw_reward", "series": [[0, 0.8], [1, 0.9]]}) + "\n")
    db = tmp_path / "metric_gate.db"
    dag_id = f"mapped_gate_{uuid.uuid4().hex[:8]}"
    dag_file = airflow_env.scratch_dags / f"{dag_id}.py"
    dag_file.write_text(textwrap.dedent(DAG_TEMPLATE.format(dag_id=dag_id, record=str(record))))

    result = airflow_env.dag_test(
        dag_id,
        dag_file=dag_file,
        logical_date="2026-11-30T00:00:00+00:00",
        env={"AIRFLOW_CONN_METRIC_GATE_DB": f"sqlite:///{db}"},
    )

    assert result.state == "success", result.output[-6000:]
    persisted = [result.xcom["persist_values[0]"], result.xcom["persist_values[1]"]]
    verdicts = [result.xcom["evaluate_gate[0]"], result.xcom["evaluate_gate[1]"]]
    assert [p["series"] for p in persisted] == ["rl-a", "rl-b"]
    assert persisted[0]["run_id"] != persisted[1]["run_id"]
    assert [v["run_id"] for v in verdicts] == [p["run_id"] for p in persisted]
    assert [v["series"] for v in verdicts] == ["rl-a", "rl-b"]
    with sqlite3.connect(db) as conn:
        rows = conn.execute("SELECT series, map_index FROM runs").fetchall()
    assert sorted(rows) == [("rl-a", 0), ("rl-b", 1)]
