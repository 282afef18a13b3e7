"""dags/nightly_metric_gate.py under ``dag.test()`` with ``record_root`` on a local S3 server.

The records live in a bucket of the moto server the test session starts (``s3_server``); the DAG
reads them through the Airflow connection named in the URI (``s3://gate_s3@bucket/records``).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from _gate_data import NIGHTLY_VALUES, jsonl_text, night_files
from test_nightly_metric_gate import DAG_ID, ROWS_PER_NIGHT, SERIES, GateStore

pytestmark = pytest.mark.airflow_db
pytest.importorskip("s3fs")


def _put_night(client, bucket: str, day: str) -> int:
    """One record directory of two objects (steps split between two ranks) and its marker."""
    size = 0
    for name, lines in night_files(NIGHTLY_VALUES).items():
        body = jsonl_text(lines).encode()
        client.put_object(Bucket=bucket, Key=f"records/{day}/{name}", Body=body)
        size += len(body)
    client.put_object(Bucket=bucket, Key=f"records/{day}/_SUCCESS", Body=b"")
    return size


def test_a_night_on_object_storage_is_gated_end_to_end(airflow_env, s3_server, s3_bucket, tmp_path):
    _put_night(s3_server.client(), s3_bucket, "2026-11-01")
    store = GateStore("sqlite", f"sqlite:///{tmp_path / 'metric_gate.db'}")
    copies = tmp_path / "record-copies"
    env = {**store.env, **s3_server.env(), "AIRFLOW__METRIC_GATE__RECORD_COPY_DIR": str(copies)}
    root = f"s3://gate_s3@{s3_bucket}/records"
    run = {
        "dag_id": DAG_ID,
        "conf": {"record_root": root, "series": SERIES, "role": "baseline"},
        "logical_date": "2026-11-01T00:00:00+00:00",
    }
    (result,) = airflow_env.dag_tests([run], env=env)

    assert result.state == "success", result.output[-6000:]
    assert result.xcom["metric_gate.wait_for_record"] == f"{root}/2026-11-01"
    ingest = result.xcom["metric_gate.ingest_record"]
    assert (ingest["location"], ingest["files"], ingest["metrics"]) == (f"{root}/2026-11-01", 2, 4)
    assert ingest["copy"] is True  # the local copy persist read, instead of downloading again
    assert result.xcom["metric_gate.select_steps"]["checksum"] == ingest["checksum"]  # a reference, no values
    assert "not downloaded again" in result.output
    assert list(copies.iterdir()) == []  # removed once stored
    verdict = result.xcom["metric_gate.evaluate_gate"]
    assert verdict["trusted"] is True and verdict["role"] == "baseline"
    assert store.run(result.xcom["metric_gate.persist_values"]["run_id"])["rows"] == ROWS_PER_NIGHT
    everything = result.output + json.dumps(result.xcom)
    assert s3_server.secret_key not in everything
    assert Path(store.url.removeprefix("sqlite:///")).exists()
