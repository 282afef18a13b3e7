"""Records on object storage, against a real S3 API: a moto server on loopback (``s3_server``).

The sensor, the trigger and the operators read through the Airflow connection ``gate_s3`` (an
``aws`` connection with ``endpoint_url`` in its extras, set as ``AIRFLOW_CONN_GATE_S3``); the CLI
runs as a process of its own, with nothing but that environment.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import socket
import subprocess
import sys
import threading
from datetime import datetime, timezone
from unittest import mock

import pytest
from _fakes import context as fake_context
from airflow.sdk.exceptions import (
    AirflowException,
    AirflowFailException,
    AirflowRescheduleException,
    AirflowSensorTimeout,
    TaskDeferred,
)

from airflow_metric_gate.operators.ingest import IngestRecordOperator
from airflow_metric_gate.operators.persist import PersistValuesOperator
from airflow_metric_gate.operators.select import SelectStepsOperator
from airflow_metric_gate.sensors.training_output import TrainingOutputSensor

pytestmark = pytest.mark.slow

pytest.importorskip("s3fs")

CONN = "gate_s3"
LINES = {
    "rank0.jsonl": [
        {"metric": "rollout/raw_reward", "series": [[0, 0.80], [2, 0.82]]},
        {"metric": "train/grad_norm", "series": [[0, 1.0], [2, 1.0]]},
    ],
    "rank1.jsonl": [
        {"metric": "rollout/raw_reward", "series": [[1, 0.81], [3, 0.83]]},
        {"metric": "train/grad_norm", "series": [[1, 1.0], [3, 1.0]]},
    ],
}
GATES_YAML = """\
gates:
  - metric_key: rollout/raw_reward
    steps: all
    constraint: {rel_up: 0.2, rel_down: 0.2}
  - metric_key: train/grad_norm
"""


class Bucket:
    """One test's bucket on the local S3 server."""

    def __init__(self, server, name: str) -> None:
        self.server = server
        self.name = name
        self.client = server.client()

    def uri(self, key: str, conn_id: str | None = CONN) -> str:
        return f"s3://{conn_id + '@' if conn_id else ''}{self.name}/{key}"

    def put(self, key: str, body: str | bytes = b"") -> None:
        self.client.put_object(Bucket=self.name, Key=key, Body=body.encode() if isinstance(body, str) else body)

    def put_night(self, prefix: str = "night", *, marker: bool = True, lines=None) -> int:
        """Write a record directory of two objects (and its marker); return its data bytes."""
        size = 0
        for name, content in (lines or LINES).items():
            body = "".join(json.dumps(line) + "\n" for line in content) if isinstance(content, list) else content
            self.put(f"{prefix}/{name}", body)
            size += len(body.encode())
        if marker:
            self.put(f"{prefix}/_SUCCESS")
        return size


@pytest.fixture
def bucket(s3_server, s3_bucket):
    return Bucket(s3_server, s3_bucket)


def _sensor(path, **kwargs) -> TrainingOutputSensor:
    kwargs.setdefault("poke_interval", 0.1)
    kwargs.setdefault("timeout", 30)
    return TrainingOutputSensor(task_id="wait_for_record", path=path, **kwargs)


# -- the sensor sees a marker that lands after its first check --------------------------------


def test_poke_mode_sees_a_marker_uploaded_after_the_first_check(bucket):
    bucket.put_night(marker=False)
    sensor = _sensor(bucket.uri("night"))
    checks = []
    poke = sensor.poke

    def poke_then_finish_training(context):
        result = poke(context)
        checks.append(bool(result))
        if len(checks) == 1:
            bucket.put("night/_SUCCESS")
        return result

    with mock.patch.object(sensor, "poke", poke_then_finish_training):
        assert sensor.execute({}) == bucket.uri("night")
    assert checks == [False, True]


def test_poke_mode_sees_a_record_file_and_marker_that_land_later(bucket):
    sensor = _sensor(bucket.uri("nightly/metrics.jsonl"))
    assert not sensor.poke({})
    bucket.put("nightly/metrics.jsonl", '{"metric": "m", "series": [[0, 1.0]]}\n')
    assert not sensor.poke({})
    bucket.put("nightly/_SUCCESS")
    assert sensor.poke({}).xcom_value == bucket.uri("nightly/metrics.jsonl")


def test_reschedule_mode_sees_a_marker_uploaded_after_the_first_check(bucket):
    bucket.put_night(marker=False)
    sensor = _sensor(bucket.uri("night"), mode="reschedule", timeout=3600)
    ti = mock.Mock()
    ti.get_first_reschedule_date.return_value = None
    with pytest.raises(AirflowRescheduleException):
        sensor.execute({"ti": ti})
    bucket.put("night/_SUCCESS")
    ti.get_first_reschedule_date.return_value = datetime.now(timezone.utc)
    assert sensor.execute({"ti": ti}) == bucket.uri("night")


def test_deferrable_mode_sees_a_marker_uploaded_after_the_first_check(bucket):
    bucket.put_night(marker=False)
    sensor = _sensor(bucket.uri("night"), deferrable=True)
    with pytest.raises(TaskDeferred) as deferred:  # the first check, on the worker
        sensor.execute({})
    trigger = deferred.value.trigger
    checks = []

    async def run_trigger():
        # The triggerer's loop: the trigger checks, the marker lands, the trigger checks again.
        loop = asyncio.get_running_loop()
        uploaded = asyncio.Event()

        def upload():
            bucket.put("night/_SUCCESS")
            loop.call_soon_threadsafe(uploaded.set)

        timer = threading.Timer(0.5, upload)
        timer.start()
        events = []
        async for event in trigger.run():
            events.append(event)
        timer.join()
        checks.append(uploaded.is_set())
        return events

    events = asyncio.run(asyncio.wait_for(run_trigger(), 30))
    assert [e.payload for e in events] == [{"status": "success", "location": bucket.uri("night")}]
    assert checks == [True]
    assert sensor.execute_complete({}, events[0].payload) == bucket.uri("night")


def test_missing_record_times_out_naming_the_record(bucket):
    sensor = _sensor(bucket.uri("2026-11-30"), timeout=0.5)
    with pytest.raises(AirflowSensorTimeout, match=r"the record s3://gate_s3@\S+/2026-11-30 does not exist"):
        sensor.execute({})


def test_missing_marker_times_out_naming_the_marker(bucket):
    bucket.put_night(marker=False)
    sensor = _sensor(bucket.uri("night"), timeout=0.5)
    with pytest.raises(AirflowSensorTimeout, match=r"completion marker s3://gate_s3@\S+/night/_SUCCESS does not"):
        sensor.execute({})


def test_deferred_missing_marker_times_out_naming_the_marker(bucket):
    bucket.put_night(marker=False)
    sensor = _sensor(bucket.uri("night"), deferrable=True, timeout=0.5)
    with pytest.raises(TaskDeferred) as deferred:
        sensor.execute({})

    async def collect():
        return [event async for event in deferred.value.trigger.run()]

    (event,) = asyncio.run(asyncio.wait_for(collect(), 30))
    assert event.payload["status"] == "timeout" and event.payload["missing"] == "marker"
    with pytest.raises(AirflowSensorTimeout, match=r"night/_SUCCESS does not"):
        sensor.execute_complete({}, event.payload)


# -- the CLI on object-storage URIs --------------------------------------------------------------


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _cli(tmp_path, *argv, env=None):
    """Run ``metric-gate`` in a process of its own with only ``env`` (no AWS_* variables)."""
    gates = tmp_path / "gates.yaml"
    gates.write_text(GATES_YAML)
    base = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "AIRFLOW_"))}
    base["AIRFLOW_HOME"] = str(tmp_path / "airflow-home")
    base.update(env or {})
    args = [sys.executable, "-m", "airflow_metric_gate.cli", *argv]
    if argv and argv[0] == "run":
        args += ["--gates", str(gates), "--store", f"sqlite:///{tmp_path / 'gate.db'}"]
    return subprocess.run(args, capture_output=True, text=True, env=base, timeout=120)


def _cli_here(capsys, tmp_path, *argv):
    """Run ``metric-gate run`` in this process (the connection is in this process's environment)."""
    from airflow_metric_gate.cli import main

    gates = tmp_path / "gates.yaml"
    gates.write_text(GATES_YAML)
    code = main(["run", *argv, "--gates", str(gates), "--store", f"sqlite:///{tmp_path / 'gate.db'}"])
    out, err = capsys.readouterr()
    return subprocess.CompletedProcess(argv, code, out, err)


def _assert_no_secret(proc, *secrets):
    for secret in secrets:
        assert secret not in proc.stdout and secret not in proc.stderr


def test_cli_reads_a_record_through_the_connection_named_in_the_uri(tmp_path, s3_server, bucket):
    bucket.put_night()
    proc = _cli(tmp_path, "run", bucket.uri("night"), "--json", env=s3_server.env())
    assert proc.returncode == 0, proc.stderr
    verdict = json.loads(proc.stdout)  # stdout holds only the verdict: no log line
    assert verdict["counts"]["INACTIVE"] > 0
    _assert_no_secret(proc, s3_server.secret_key)


def test_cli_storage_conn_id_option_is_the_same_as_the_uri_form(capsys, tmp_path, bucket):
    bucket.put_night()
    proc = _cli_here(capsys, tmp_path, bucket.uri("night", conn_id=None), "--storage-conn-id", CONN)
    assert proc.returncode == 0, proc.stderr


def test_cli_without_airflow_connection_uses_the_filesystem_configuration(tmp_path, s3_server, bucket):
    bucket.put_night()
    env = {
        "AWS_ACCESS_KEY_ID": s3_server.access_key,
        "AWS_SECRET_ACCESS_KEY": s3_server.secret_key,
        "AWS_ENDPOINT_URL": s3_server.endpoint,
        "AWS_DEFAULT_REGION": s3_server.region,
    }
    for uri in (bucket.uri("night", conn_id=None), bucket.uri("night", conn_id="not_defined")):
        proc = _cli(tmp_path, "run", uri, env=env)
        assert proc.returncode == 0, proc.stderr
        _assert_no_secret(proc, s3_server.secret_key)


def test_cli_bad_credentials_exit_2_naming_the_uri_and_no_secret(tmp_path, s3_server, bucket):
    bucket.put_night()
    wrong = "wrong-secret-0123456789"
    proc = _cli(tmp_path, "run", bucket.uri("night"), env=s3_server.env(secret_key=wrong))
    assert proc.returncode == 2, proc.stderr
    assert bucket.uri("night") in proc.stderr and "check the storage credentials" in proc.stderr
    assert "Traceback" not in proc.stderr
    _assert_no_secret(proc, wrong, s3_server.secret_key)


def test_cli_unreachable_storage_exit_3_retryable(tmp_path, s3_server, bucket):
    conn = json.loads(s3_server.connection())
    conn["extra"]["endpoint_url"] = f"http://127.0.0.1:{_closed_port()}"
    conn["extra"]["config_kwargs"] = {"retries": {"max_attempts": 1}, "connect_timeout": 2}
    proc = _cli(tmp_path, "run", bucket.uri("night"), env={f"AIRFLOW_CONN_{CONN.upper()}": json.dumps(conn)})
    assert proc.returncode == 3, proc.stderr
    assert bucket.uri("night") in proc.stderr and "retry" in proc.stderr
    assert "Traceback" not in proc.stderr
    _assert_no_secret(proc, s3_server.secret_key)


@pytest.mark.parametrize("key", ["no-such-night", "night/rank9.jsonl"])
def test_cli_missing_object_exit_2(capsys, tmp_path, bucket, key):
    bucket.put_night()
    proc = _cli_here(capsys, tmp_path, bucket.uri(key))
    assert proc.returncode == 2, proc.stderr
    assert bucket.uri(key) in proc.stderr and "Traceback" not in proc.stderr


@pytest.mark.parametrize("uri", ["s3://gate_s3@/night", "s3://gate_s3@Not_A_Bucket!/night"])
def test_cli_bad_uri_exit_2(capsys, tmp_path, bucket, uri):
    proc = _cli_here(capsys, tmp_path, uri)
    assert proc.returncode == 2, proc.stderr
    assert uri in proc.stderr and "Traceback" not in proc.stderr


def test_cli_malformed_line_is_named_as_uri_and_line(capsys, tmp_path, bucket):
    bad = '{"metric": "m", "series": []}\n{oops\n'
    bucket.put_night(lines={"rank0.jsonl": LINES["rank0.jsonl"], "rank1.jsonl": bad})
    proc = _cli_here(capsys, tmp_path, bucket.uri("night"))
    assert proc.returncode == 2, proc.stderr
    assert f"{bucket.uri('night/rank1.jsonl')}:2" in proc.stderr


# -- the operators: merge, errors, bytes read per night ------------------------------------------


@pytest.fixture
def bytes_read(monkeypatch):
    """Count the bytes s3fs file objects fetch from the storage."""
    from s3fs.core import S3File

    counter = {"bytes": 0}
    fetch = S3File._fetch_range

    def counting(self, start, end):
        data = fetch(self, start, end)
        counter["bytes"] += len(data)
        return data

    monkeypatch.setattr(S3File, "_fetch_range", counting)
    return counter


def context(upstream=None):
    """A scheduled run of DAG ``s3_night``, its task pulling ``upstream`` from ``ingest_record``."""
    pulled = {} if upstream is None else {("ingest_record", None): upstream}
    return fake_context(dag_id="s3_night", run_id="scheduled__2026-11-30", task_id="t", upstream=pulled)


def _select_after_ingest(**kwargs) -> SelectStepsOperator:
    from airflow.providers.standard.operators.empty import EmptyOperator
    from airflow.sdk import DAG

    gates = [{"metric_key": "rollout/raw_reward", "steps": "all"}, {"metric_key": "train/grad_norm"}]
    kwargs.setdefault("gates", gates)
    with DAG(dag_id="s3_night", schedule=None):
        select = SelectStepsOperator(task_id="select_steps", **kwargs)
        EmptyOperator(task_id="ingest_record") >> select
    return select


@pytest.fixture
def sqlite_store(tmp_path, monkeypatch):
    """The store persist writes to, and a way to read back the values of the rollout reward."""
    path = tmp_path / "store.db"
    monkeypatch.setenv("AIRFLOW_CONN_METRIC_GATE_DB", f"sqlite:///{path}")

    def rewards():
        import sqlite3

        with sqlite3.connect(path) as conn:
            return [v for (v,) in conn.execute(
                "SELECT value FROM metric_values WHERE metric_key = 'rollout/raw_reward' ORDER BY step")]

    return rewards


def _persist(reference):
    return PersistValuesOperator(task_id="persist_values", series="rl", selection=reference).execute(context())


def test_a_night_merged_from_several_objects_is_downloaded_once(bucket, bytes_read, sqlite_store, tmp_path):
    from airflow_metric_gate.operators import _record_copy

    size = bucket.put_night()
    with mock.patch.object(_record_copy, "cache_root", return_value=tmp_path / "copies"):
        summary = IngestRecordOperator(task_id="ingest_record", location=bucket.uri("night")).execute(context())
        assert (summary["metrics"], summary["points"], summary["files"]) == (2, 8, 2)
        assert summary["location"] == bucket.uri("night")
        assert summary["copy"] is True
        reference = _select_after_ingest().execute(context(summary))
        assert bytes_read["bytes"] == size  # select reads nothing
        assert reference["checksum"] == summary["checksum"]
        assert _persist(reference)["rows"] == 8
        assert bytes_read["bytes"] == size  # persist reads the verified local copy, then removes it
        assert list((tmp_path / "copies").iterdir()) == []
    assert sqlite_store() == [0.80, 0.81, 0.82, 0.83]  # merged from both objects, in step order


def test_persist_reads_storage_again_when_the_local_copy_is_gone_or_altered(bucket, bytes_read, sqlite_store,
                                                                             tmp_path):
    from airflow_metric_gate.operators import _record_copy

    size = bucket.put_night()
    select = _select_after_ingest(gates=[{"metric_key": "rollout/raw_reward", "steps": "all"}])
    ingest = IngestRecordOperator(task_id="ingest_record", location=bucket.uri("night"))
    with mock.patch.object(_record_copy, "cache_root", return_value=tmp_path / "copies"):
        summary = ingest.execute(context())
        (copy,) = (tmp_path / "copies").iterdir()
        next(copy.rglob("rank0.jsonl")).write_text('{"metric": "rollout/raw_reward", "series": [[0, 9.9]]}\n')
        _persist(select.execute(context(summary)))
        assert sqlite_store() == [0.80, 0.81, 0.82, 0.83]  # not the altered copy
        assert bytes_read["bytes"] == 2 * size

        summary = ingest.execute(context())  # a fresh copy; then it is gone (another machine)
        shutil.rmtree(tmp_path / "copies")
        _persist(select.execute(context(summary)))
        assert sqlite_store() == [0.80, 0.81, 0.82, 0.83]
        assert bytes_read["bytes"] == 4 * size


def test_record_changed_on_the_storage_after_ingest_fails_persist_without_retry(bucket, sqlite_store, tmp_path):
    from airflow_metric_gate.operators import _record_copy

    bucket.put_night()
    with mock.patch.object(_record_copy, "cache_root", return_value=tmp_path / "copies"):
        summary = IngestRecordOperator(task_id="ingest_record", location=bucket.uri("night")).execute(context())
        shutil.rmtree(tmp_path / "copies")  # persist runs on another machine
        lines = dict(LINES, **{"rank1.jsonl": [{"metric": "rollout/raw_reward", "series": [[1, 0.1]]}]})
        bucket.put_night(lines=lines)
        reference = _select_after_ingest().execute(context(summary))
        with pytest.raises(AirflowFailException, match="changed after it was ingested") as err:
            _persist(reference)
    assert bucket.uri("night") in str(err.value)
    assert not (tmp_path / "store.db").exists()  # nothing stored: the store was not even opened


def test_malformed_line_fails_ingest_naming_the_object_and_line(bucket):
    bucket.put_night(lines={"rank0.jsonl": LINES["rank0.jsonl"], "rank1.jsonl": '{"metric": "m", "series": []}\n{x\n'})
    op = IngestRecordOperator(task_id="ingest_record", location=bucket.uri("night"))
    with pytest.raises(AirflowFailException, match=rf"{bucket.uri('night/rank1.jsonl')}:2: not valid JSON"):
        op.execute(context())


def test_unreachable_storage_is_retried_bad_credentials_are_not(bucket, s3_server, monkeypatch):
    bucket.put_night()
    monkeypatch.setenv("AIRFLOW_CONN_GATE_S3_BAD", s3_server.connection(secret_key="wrong-secret-0123456789"))
    op = IngestRecordOperator(task_id="ingest_record", location=bucket.uri("night", conn_id="gate_s3_bad"))
    with pytest.raises(AirflowFailException) as err:
        op.execute(context())
    assert bucket.uri("night", conn_id="gate_s3_bad") in str(err.value)
    assert "wrong-secret" not in str(err.value)

    conn = json.loads(s3_server.connection())
    conn["extra"]["endpoint_url"] = f"http://127.0.0.1:{_closed_port()}"
    conn["extra"]["config_kwargs"] = {"retries": {"max_attempts": 1}, "connect_timeout": 2}
    monkeypatch.setenv("AIRFLOW_CONN_GATE_S3_DOWN", json.dumps(conn))
    op = IngestRecordOperator(task_id="ingest_record", location=bucket.uri("night", conn_id="gate_s3_down"))
    with pytest.raises(AirflowException) as err:
        op.execute(context())
    assert not isinstance(err.value, AirflowFailException)
    assert bucket.uri("night", conn_id="gate_s3_down") in str(err.value)


def test_cli_missing_credentials_exit_2_naming_the_uri(capsys, tmp_path, bucket, s3_server, monkeypatch):
    bucket.put_night()
    monkeypatch.setenv("AWS_ENDPOINT_URL", s3_server.endpoint)  # the server, but no keys anywhere
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    proc = _cli_here(capsys, tmp_path, bucket.uri("night", conn_id=None))
    assert proc.returncode == 2, proc.stderr
    assert bucket.uri("night", conn_id=None) in proc.stderr and "Traceback" not in proc.stderr
    assert "check the storage credentials" in proc.stderr
    _assert_no_secret(proc, s3_server.secret_key)
