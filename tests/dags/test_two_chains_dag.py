"""Two gate chains (two series) in one DAG run keep two store runs and two histories, on Postgres."""

from __future__ import annotations

import json
import textwrap
import uuid

import pytest

pytestmark = [pytest.mark.airflow_db, pytest.mark.postgres]

DAG_TEMPLATE = """
from __future__ import annotations

import pendulum

from airflow.sdk import DAG

from airflow_metric_gate.operators.evaluate import EvaluateGateOperator
from airflow_metric_gate.operators.persist import PersistValuesOperator
from airflow_metric_gate.operators.select import SelectStepsOperator

GATES = [{{"metric_key": "rollout/raw_reward", "steps": "all", "constraint": {{"rel_up": 0.2, "rel_down": 0.2}}}}]

with DAG(dag_id={dag_id!r}, schedule=None, start_date=pendulum.datetime(2026, 1, 1, tz="UTC"), catchup=False):
    for series, record in {records!r}.items():
        select = SelectStepsOperator(task_id=f"select_{{series}}", record=record, gates=GATES)
        persist = PersistValuesOperator(
            task_id=f"persist_{{series}}", selection=select.output, series=series, role="baseline"
        )
        EvaluateGateOperator(task_id=f"evaluate_{{series}}", run=persist.output, enforce=True, all_results=True,
                             min_history=1)
"""

REWARD = {"rl-7b": 0.8, "rl-70b": 0.3}  # far apart: each is a regression in the other's band
NIGHTS = ("2026-11-01", "2026-11-02", "2026-11-03", "2026-11-04")


def _query(url, sql, *params):
    import psycopg2

    conn = psycopg2.connect(url)
    try:
        with conn.cursor() as cur:
            cur.execute(sql, params)
            return cur.fetchall()
    finally:
        conn.close()


def test_two_series_chains_in_one_dag_run_keep_their_histories_apart(airflow_env, pg_url, tmp_path):
    records = {}
    for series, reward in REWARD.items():
        path = tmp_path / f"{series}.jsonl"
        path.write_text(json.dumps({"metric": "rollout/raw_reward", "series": [[0, reward], [1, reward]]}) + "\n")
        records[series] = str(path)
    dag_id = f"two_chains_{uuid.uuid4().hex[:8]}"
    dag_file = airflow_env.scratch_dags / f"{dag_id}.py"
    dag_file.write_text(textwrap.dedent(DAG_TEMPLATE.format(dag_id=dag_id, records=records)))

    results = airflow_env.dag_tests(
        [{"dag_id": dag_id, "dag_file": dag_file, "logical_date": f"{night}T00:00:00+00:00"} for night in NIGHTS],
        env={"AIRFLOW_CONN_METRIC_GATE_DB": pg_url},
    )

    for night, result in zip(NIGHTS, results):
        assert result.state == "success", (night, result.output[-6000:])
        persisted = {series: result.xcom[f"persist_{series}"] for series in REWARD}
        assert persisted["rl-7b"]["run_id"] != persisted["rl-70b"]["run_id"]
        for series, reward in REWARD.items():
            verdict = result.xcom[f"evaluate_{series}"]
            assert (verdict["series"], verdict["run_id"]) == (series, persisted[series]["run_id"])
            assert {r["current"] for r in verdict["results"]} == {reward}, verdict
            assert verdict["trusted"] is True, verdict
    last = {series: results[-1].xcom[f"evaluate_{series}"] for series in REWARD}
    for series, reward in REWARD.items():  # judged against three earlier nights of its own series only
        assert {(r["status"], r["n"]) for r in last[series]["results"]} == {("PASS", 3)}
        assert [r["ref"] for r in last[series]["results"]] == pytest.approx([reward, reward])

    rows = _query(pg_url, "SELECT series, status, COUNT(*) FROM runs GROUP BY series, status ORDER BY series")
    assert rows == [("rl-70b", "trusted", len(NIGHTS)), ("rl-7b", "trusted", len(NIGHTS))]
    values = _query(
        pg_url,
        "SELECT r.series, MIN(v.value), MAX(v.value), COUNT(*) FROM metric_values v JOIN runs r USING (run_id) "
        "GROUP BY r.series ORDER BY r.series",
    )
    assert values == [("rl-70b", 0.3, 0.3, 2 * len(NIGHTS)), ("rl-7b", 0.8, 0.8, 2 * len(NIGHTS))]
    tasks = _query(pg_url, "SELECT DISTINCT series, provenance::json->>'task_id' FROM runs ORDER BY 1")
    assert tasks == [("rl-70b", "persist_rl-70b"), ("rl-7b", "persist_rl-7b")]
