"""IngestRecordOperator: reads and validates the record, passes a compact summary on."""

from __future__ import annotations

import json

import pytest
from _fakes import chained, context
from airflow.sdk.exceptions import AirflowFailException

from airflow_metric_gate.operators.ingest import IngestRecordOperator


def _record_dir(tmp_path):
    night = tmp_path / "2026-11-30"
    night.mkdir()
    (night / "rank0.jsonl").write_text(
        json.dumps({"metric": "train/grad_norm", "series": [[0, 1.0], [2, 1.1]]})
        + "\n"
        + json.dumps({"metric": "rollout/raw_reward", "series": [[0, 0.8]]})
        + "\n"
    )
    (night / "rank1.jsonl").write_text(json.dumps({"metric": "train/grad_norm", "series": [[1, 1.2]]}) + "\n")
    (night / "_SUCCESS").touch()
    return night


def test_explicit_location_returns_compact_json_summary(tmp_path):
    night = _record_dir(tmp_path)
    summary = IngestRecordOperator(task_id="ingest", location=str(night)).execute(context())
    checksum = summary.pop("checksum")
    assert summary == {"location": str(night), "format": "series", "metrics": 2, "points": 4, "files": 2,
                       "skipped": 1}
    assert json.loads(json.dumps(summary)) == summary
    assert len(checksum) == 64 and int(checksum, 16) >= 0


def test_checksum_pins_the_bytes_read_and_ignores_skipped_entries(tmp_path):
    night = _record_dir(tmp_path)
    ingest = IngestRecordOperator(task_id="ingest", location=str(night))
    first = ingest.execute(context())["checksum"]
    (night / "_SUCCESS").write_text("done again")  # skipped: not part of the record
    assert ingest.execute(context())["checksum"] == first
    rank = next(night.glob("rank*.jsonl"))
    rank.write_text(rank.read_text().replace("1", "2", 1))
    assert ingest.execute(context())["checksum"] != first


def test_skipped_entries_are_logged_and_counted(tmp_path, capsys):
    night = _record_dir(tmp_path)
    (night / "rank2.jsonl.tmp").write_text("partial")
    (night / "logs").mkdir()
    summary = IngestRecordOperator(task_id="ingest", location=str(night)).execute(context())
    assert summary["skipped"] == 3 and summary["files"] == 2
    log = "".join(capsys.readouterr())
    for name in ("_SUCCESS", "rank2.jsonl.tmp", "logs"):
        assert f"Skipped {night / name}: " in log


def test_fifo_in_the_record_directory_fails_without_retry(tmp_path):
    import os

    night = _record_dir(tmp_path)
    os.mkfifo(night / "rank2.jsonl")
    with pytest.raises(AirflowFailException, match="not a regular file"):
        IngestRecordOperator(task_id="ingest", location=str(night)).execute(context())


def test_location_from_upstream_sensor_xcom(tmp_path):
    night = _record_dir(tmp_path)
    op = chained(IngestRecordOperator, upstream_task_id="wait_for_record")
    summary = op.execute(context(upstream={("wait_for_record", -1): str(night)}))
    assert summary["location"] == str(night)
    assert summary["metrics"] == 2


def test_object_storage_uri(tmp_path):
    night = _record_dir(tmp_path)
    summary = IngestRecordOperator(task_id="ingest", location=f"file://{night}").execute(context())
    assert summary["location"] == f"file://{night}"
    assert summary["points"] == 4


def test_rows_format(tmp_path):
    record = tmp_path / "history.jsonl"
    record.write_text(
        json.dumps({"step": 0, "train/grad_norm": 1.0, "rollout/raw_reward": 0.5})
        + "\n"
        + json.dumps({"step": 1, "train/grad_norm": 1.1})
        + "\n"
    )
    summary = IngestRecordOperator(task_id="ingest", location=str(record), format="rows").execute(context())
    assert (summary["format"], summary["metrics"], summary["points"]) == ("rows", 2, 3)


def test_malformed_record_fails_without_retry_naming_file_and_line(tmp_path):
    record = tmp_path / "bad.jsonl"
    record.write_text(json.dumps({"metric": "m", "series": [[0, 1.0]]}) + "\n" + "{not json\n")
    with pytest.raises(AirflowFailException, match=r"bad\.jsonl:2"):
        IngestRecordOperator(task_id="ingest", location=str(record)).execute(context())


def test_absent_record_fails_without_retry(tmp_path):
    with pytest.raises(AirflowFailException, match="no such file"):
        IngestRecordOperator(task_id="ingest", location=str(tmp_path / "nope")).execute(context())


def test_unknown_format_fails(tmp_path):
    night = _record_dir(tmp_path)
    with pytest.raises(AirflowFailException, match="format"):
        IngestRecordOperator(task_id="ingest", location=str(night), format="csv").execute(context())


def test_no_location_and_no_upstream_says_what_to_pass():
    with pytest.raises(AirflowFailException, match="location=<upstream task>.output"):
        IngestRecordOperator(task_id="ingest").execute(context())


def test_templated_fields():
    assert set(IngestRecordOperator.template_fields) == {"location", "format", "storage_conn_id"}
