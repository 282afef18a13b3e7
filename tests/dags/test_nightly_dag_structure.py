"""dags/nightly_metric_gate.py (the packaged nightly DAG) as the scheduler sees it: schedule, params, wiring, docs."""

from __future__ import annotations

import copy
import importlib.util
from datetime import datetime, timezone
from pathlib import Path
from types import SimpleNamespace

import pytest

DAG_FILE = Path(__file__).resolve().parents[2] / "dags" / "nightly_metric_gate.py"


@pytest.fixture(scope="module")
def dag():
    spec = importlib.util.spec_from_file_location("nightly_metric_gate_under_test", DAG_FILE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.dag


def test_daily_without_catchup(dag):
    assert dag.dag_id == "nightly_metric_gate"
    assert dag.catchup is False
    assert dag.schedule == "@daily"


def test_params_for_record_root_series_identity_and_gates_file(dag):
    assert {"record_root", "series", "backend", "suite", "gates_file", "role", "night"} <= set(dag.params)
    assert dag.params["role"] == "auto"
    assert (DAG_FILE.parent / dag.params["gates_file"]).is_file()


def test_sensor_then_the_four_operators_in_a_line_in_the_metric_gate_group(dag):
    order = [f"metric_gate.{name}" for name in
             ("wait_for_record", "ingest_record", "select_steps", "persist_values", "evaluate_gate")]
    assert sorted(dag.task_ids) == sorted(order)
    for upstream, downstream in zip(order, order[1:], strict=False):
        assert dag.get_task(downstream).upstream_task_ids == {upstream}
    assert set(dag.task_group_dict) == {"metric_gate"}


def test_scheduled_runs_fail_loudly(dag):
    assert dag.get_task("metric_gate.evaluate_gate").enforce is True
    assert dag.get_task("metric_gate.wait_for_record").deferrable is True


def test_the_doc_names_every_task_by_its_id(dag):
    for task_id in dag.task_ids:
        assert f"`{task_id}`" in dag.doc_md


def test_doc_tells_on_call_how_to_read_a_failure(dag):
    assert "metric-gate: <series> run <id>: NOT-TRUSTED" in dag.doc_md
    assert "XCom `return_value`" in dag.doc_md


@pytest.mark.parametrize(
    ("night", "logical_date", "expected"),
    [
        ("", datetime(2026, 11, 30, tzinfo=timezone.utc), "/records/2026-11-30"),
        ("", None, "/records/2026-12-01"),  # an Airflow 3 manual run may have no logical date
        ("2026-11-02", datetime(2026, 11, 30, tzinfo=timezone.utc), "/records/2026-11-02"),
    ],
)
def test_record_path_is_the_nights_folder(dag, night, logical_date, expected):
    sensor = copy.deepcopy(dag.get_task("metric_gate.wait_for_record"))  # rendering is in place
    dag_run = SimpleNamespace(logical_date=logical_date, run_after=datetime(2026, 12, 1, 6, tzinfo=timezone.utc))
    sensor.render_template_fields({"params": {"record_root": "/records", "night": night}, "dag_run": dag_run})
    assert sensor.path == expected
