"""TensorBoard and CSV records on object storage, against a real S3 API (the moto server of ``s3_server``)."""

from __future__ import annotations

import json
from unittest import mock

import pytest
from _fakes import context
from _log_writers import GATES_YAML, night_points, write_lightning_csv, write_tensorboard_night

from airflow_metric_gate.operators.ingest import IngestRecordOperator
from airflow_metric_gate.operators.persist import PersistValuesOperator
from airflow_metric_gate.operators.select import SelectStepsOperator
from airflow_metric_gate.records import RecordError, read_record
from airflow_metric_gate.sensors.training_output import TrainingOutputSensor
from airflow_metric_gate.storage import record_path

CONN = "gate_s3"


@pytest.fixture
def upload(s3_server, s3_bucket, tmp_path):
    """Upload a local folder's files under a prefix of the test's bucket; return the folder's URI."""
    client = s3_server.client()

    def put(folder, prefix="night", *, skip=()):
        for file in sorted(folder.iterdir()):
            if file.name not in skip:
                client.put_object(Bucket=s3_bucket, Key=f"{prefix}/{file.name}", Body=file.read_bytes())
        return f"s3://{CONN}@{s3_bucket}/{prefix}"

    return put


def _context(upstream=None):
    """A scheduled run of DAG ``s3_logs``, its task pulling ``upstream`` from ``ingest_record``."""
    pulled = {} if upstream is None else {("ingest_record", None): upstream}
    return context(dag_id="s3_logs", run_id="scheduled__2026-11-30", task_id="t", upstream=pulled)


def test_tensorboard_night_on_s3_is_awaited_ingested_and_stored(upload, tmp_path, monkeypatch):
    pytest.importorskip("tensorboardX")
    from airflow.providers.standard.operators.empty import EmptyOperator
    from airflow.sdk import DAG

    from airflow_metric_gate.operators import _record_copy

    monkeypatch.setenv("AIRFLOW_CONN_METRIC_GATE_DB", f"sqlite:///{tmp_path / 'store.db'}")
    folder = write_tensorboard_night(tmp_path / "night", night_points(0.8))
    location = upload(folder, skip=("_SUCCESS",))
    sensor = TrainingOutputSensor(task_id="wait", path=location, format="tensorboard", poke_interval=0.1, timeout=30)
    assert not sensor.poke({})
    upload(folder)
    assert sensor.poke({}).xcom_value == location
    with mock.patch.object(_record_copy, "cache_root", return_value=tmp_path / "copies"):
        summary = IngestRecordOperator(task_id="ingest_record", location=location,
                                       format="tensorboard").execute(_context())
        assert (summary["format"], summary["metrics"], summary["points"], summary["copy"]) == ("tensorboard", 2, 8,
                                                                                              True)
        with DAG(dag_id="s3_logs", schedule=None):
            select = SelectStepsOperator(task_id="select_steps", gates=[{"metric_key": "train/grad_norm"}])
            EmptyOperator(task_id="ingest_record") >> select
        reference = select.execute(_context(summary))
        stored = PersistValuesOperator(task_id="persist_values", series="rl",
                                       selection=reference).execute(_context())
    assert stored["rows"] == 4


def test_csv_log_on_s3_is_gated_through_the_cli(capsys, upload, tmp_path):
    from airflow_metric_gate.cli import main

    folder = tmp_path / "night"
    write_lightning_csv(folder / "metrics.csv", night_points(0.8))
    (folder / "hparams.yaml").write_text("lr: 0.1\n")
    location = upload(folder)
    gates = tmp_path / "gates.yaml"
    gates.write_text(GATES_YAML)
    code = main(["run", location, "--format", "csv", "--gates", str(gates), "--json", "--all",
                 "--store", f"sqlite:///{tmp_path / 'gate.db'}"])
    out, err = capsys.readouterr()
    assert code == 0, err
    verdict = json.loads(out)
    assert verdict["counts"]["INACTIVE"] == 8
    assert "hparams.yaml (not a CSV log" in err


def test_a_truncated_event_file_on_s3_names_the_object_and_offset(upload, tmp_path):
    pytest.importorskip("tensorboardX")
    folder = write_tensorboard_night(tmp_path / "night", night_points(0.8))
    (event_file,) = [p for p in folder.iterdir() if "tfevents" in p.name]
    event_file.write_bytes(event_file.read_bytes()[:-5])
    location = upload(folder)
    with pytest.raises(RecordError, match=r"record at byte offset \d+: truncated") as err:
        read_record(record_path(location), format="tensorboard")
    assert event_file.name in err.value.path and err.value.path.startswith("s3://")
