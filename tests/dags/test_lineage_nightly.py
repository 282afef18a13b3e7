"""examples/lineage_nightly.py with the OpenLineage provider and its file transport.

Two nights run with ``dag.test()``: a good one and a regressed one.  The OpenLineage listener
writes every event to a file; the evaluate task's COMPLETE and FAIL events carry the store's
``metric_values`` table as their output, with one data-quality assertion per declaration.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from _gate_data import write_record

pytestmark = pytest.mark.airflow_db

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "lineage_nightly.py"
DAG_ID = "lineage_nightly_gate"
EVALUATE = f"{DAG_ID}.metric_gate.evaluate_gate"


def _events(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()] if path.exists() else []


def test_evaluate_reports_the_store_table_and_one_assertion_per_declaration(airflow_env, tmp_path):
    root = tmp_path / "records"
    for night, reward in (("2026-11-01", 0.8), ("2026-11-02", 0.4)):
        write_record(root / night, {"part-0.jsonl": [
            {"metric": "rollout/raw_reward", "series": [[0, reward], [1, reward]]},
            {"metric": "train/grad_norm", "series": [[0, 1.0], [1, 1.0]]},
        ]})
    dag_file = airflow_env.scratch_dags / EXAMPLE.name
    shutil.copy(EXAMPLE, dag_file)
    events_file = tmp_path / "openlineage.jsonl"
    store = tmp_path / "metric_gate.db"
    env = {
        "AIRFLOW_CONN_METRIC_GATE_DB": f"sqlite:///{store}",
        "AIRFLOW__OPENLINEAGE__TRANSPORT": json.dumps({"type": "file", "log_file_path": str(events_file),
                                                       "append": True}),
        "AIRFLOW__OPENLINEAGE__NAMESPACE": "metric-gate-test",
    }
    good, regressed = airflow_env.dag_tests(
        [{"dag_id": DAG_ID, "dag_file": dag_file, "logical_date": f"{night}T00:00:00+00:00",
          "conf": {"record_root": str(root), "role": "baseline"}} for night in ("2026-11-01", "2026-11-02")],
        env=env, timeout=900,
    )
    assert good.state == "success", good.output[-6000:]
    assert regressed.state == "failed", regressed.output[-6000:]

    ends = [e for e in _events(events_file)
            if e.get("job", {}).get("name") == EVALUATE and e.get("eventType") in ("COMPLETE", "FAIL")]
    assert [e["eventType"] for e in ends] == ["COMPLETE", "FAIL"], [e.get("eventType") for e in _events(events_file)]
    for event, rewarded in zip(ends, (True, False)):
        assert event["outputs"], event["eventType"]
        (output,) = event["outputs"]
        assert output["namespace"] == f"sqlite://{store}"
        assert output["name"] == "main.metric_values"
        assertions = output["facets"]["dataQualityAssertions"]["assertions"]
        by_metric = {a["column"]: a for a in assertions}
        assert set(by_metric) == {"rollout/raw_reward", "train/grad_norm"}
        assert by_metric["train/grad_norm"]["success"] is True
        assert by_metric["rollout/raw_reward"]["success"] is rewarded
        assert by_metric["rollout/raw_reward"]["assertion"] == "within_band"
    failed = {a["column"]: a for a in ends[1]["outputs"][0]["facets"]["dataQualityAssertions"]["assertions"]}
    assert failed["rollout/raw_reward"]["actual"] == "3 FAIL, 0 ERROR"  # two steps and the night (calibrated)
