"""TrainingOutputSensor inside a real DAG run (``dag.test()``: tasks and triggers run in line)."""

from __future__ import annotations

import json
import textwrap
import uuid

import pytest

pytestmark = pytest.mark.airflow_db

DAG_TEMPLATE = """
from __future__ import annotations

import pendulum

from airflow.sdk import DAG, task

from airflow_metric_gate.sensors.training_output import TrainingOutputSensor

with DAG(dag_id={dag_id!r}, schedule=None, start_date=pendulum.datetime(2026, 1, 1, tz="UTC"), catchup=False):
    wait = TrainingOutputSensor(
        task_id="wait_for_record",
        path="{{{{ params.record_root }}}}/{{{{ ds }}}}",
        params={{"record_root": {root!r}}},
        deferrable=True,
        poke_interval=0.2,
        timeout={timeout!r},
    )

    @task
    def downstream(location: str) -> str:
        return "got " + location

    downstream(wait.output)
"""


def _write_dag(airflow_env, root, *, timeout: float) -> str:
    dag_id = f"sensor_probe_{uuid.uuid4().hex[:8]}"
    source = DAG_TEMPLATE.format(dag_id=dag_id, root=str(root), timeout=timeout)
    (airflow_env.scratch_dags / f"{dag_id}.py").write_text(textwrap.dedent(source))
    return dag_id


def _night(tmp_path, day: str = "2026-11-30"):
    record = tmp_path / "records" / day
    record.mkdir(parents=True)
    (record / "rank0.jsonl").write_text(json.dumps({"metric": "m", "series": [[0, 1.0]]}) + "\n")
    return record


def test_deferred_sensor_resumes_when_marker_lands_and_hands_location_downstream(airflow_env, tmp_path):
    record = _night(tmp_path)
    dag_id = _write_dag(airflow_env, tmp_path / "records", timeout=120)

    def land_marker_once_deferred(line: str) -> None:
        # The first poke happened on the worker and found no marker; now the trigger is polling.
        if "running trigger in line" in line:
            (record / "_SUCCESS").touch()

    result = airflow_env.dag_test(
        dag_id,
        dag_file=airflow_env.scratch_dags / f"{dag_id}.py",
        logical_date="2026-11-30T00:00:00+00:00",
        on_line=land_marker_once_deferred,
    )

    assert "running trigger in line" in result.output, "the sensor never deferred"
    assert result.state == "success", result.output[-4000:]
    assert result.xcom["wait_for_record"] == str(record)
    assert result.xcom["downstream"] == f"got {record}"
    json.dumps(result.xcom)


def test_deferred_sensor_times_out_naming_path_and_missing_marker(airflow_env, tmp_path):
    record = _night(tmp_path)  # data but no _SUCCESS, and nothing will write one
    dag_id = _write_dag(airflow_env, tmp_path / "records", timeout=1.5)

    result = airflow_env.dag_test(
        dag_id,
        dag_file=airflow_env.scratch_dags / f"{dag_id}.py",
        logical_date="2026-11-30T00:00:00+00:00",
    )

    assert result.state == "failed"
    assert result.task_state("wait_for_record") == "failed"
    assert result.task_state("downstream") == "upstream_failed"
    assert "wait_for_record" not in result.xcom
    assert f"completion marker {record / '_SUCCESS'} does not" in result.output
    assert "AirflowSensorTimeout" in result.output
