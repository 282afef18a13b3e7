"""The mlflow record format against a real tracking server on loopback, SQLite backend (issue 21).

The server (``mlflow server``) is started once for the module and stopped after it; runs are
logged through MLflow's own client.
"""

from __future__ import annotations

import json
import math
import uuid

import pytest

pytest.importorskip("mlflow")

from _log_writers import GATES_YAML, log_mlflow_night, night_points  # noqa: E402

from airflow_metric_gate.cli import main  # noqa: E402
from airflow_metric_gate.readiness import check_mlflow_run  # noqa: E402
from airflow_metric_gate.records import RecordError, read_record  # noqa: E402
from airflow_metric_gate.store import open_store  # noqa: E402
from airflow_metric_gate.triggers.training_output import check_location  # noqa: E402

pytestmark = pytest.mark.slow


@pytest.fixture
def experiment():
    return f"nightly-{uuid.uuid4().hex[:8]}"


def _location(server, run_id):
    return f"runs:/{run_id}?tracking_uri={server.uri}"


def test_every_point_is_read_across_history_pages(mlflow_server, experiment):
    # 30,000 points: more than one page (25,000) of MLflow's paginated metric history.
    points = {"train/loss": [(s, 1.0 / (s + 1)) for s in range(30_000)], "val/acc": [(3, float("nan")), (7, 0.5)]}
    run_id = log_mlflow_night(mlflow_server.client(), experiment, points)
    record = read_record(_location(mlflow_server, run_id), format="mlflow")
    assert list(record) == ["train/loss", "val/acc"]
    assert record["train/loss"] == points["train/loss"]
    (nan_step, nan_value), later = record["val/acc"]
    assert nan_step == 3 and math.isnan(nan_value) and later == (7, 0.5)
    assert record.sources == [f"mlflow run {run_id}"]


def test_a_step_logged_again_replaces_the_earlier_value(mlflow_server, experiment):
    client = mlflow_server.client()
    run_id = log_mlflow_night(client, experiment, {"loss": [(0, 1.0), (1, 0.9)]}, status=None)
    client.log_metric(run_id, "loss", 0.5, step=1)
    client.set_terminated(run_id)
    assert read_record(_location(mlflow_server, run_id), format="mlflow")["loss"] == [(0, 1.0), (1, 0.5)]


def test_a_running_run_is_not_ready_and_not_complete(mlflow_server, experiment):
    client = mlflow_server.client()
    run_id = log_mlflow_night(client, experiment, night_points(0.8), status=None)
    readiness = check_location(_location(mlflow_server, run_id), marker="_SUCCESS", storage_conn_id=None,
                               format="mlflow")
    assert not readiness.ready and readiness.missing == "finish" and "RUNNING" in readiness.reason
    with pytest.raises(RecordError, match="RUNNING"):
        read_record(_location(mlflow_server, run_id), format="mlflow")
    client.set_terminated(run_id)
    assert check_mlflow_run(_location(mlflow_server, run_id)).ready


def test_a_failed_run_and_a_missing_run_are_bad_input(mlflow_server, experiment):
    run_id = log_mlflow_night(mlflow_server.client(), experiment, night_points(0.8), status="FAILED")
    with pytest.raises(RecordError, match="the run ended FAILED"):
        check_mlflow_run(_location(mlflow_server, run_id))
    with pytest.raises(RecordError, match="FAILED"):
        read_record(_location(mlflow_server, run_id), format="mlflow")
    with pytest.raises(RecordError, match="RESOURCE_DOES_NOT_EXIST") as err:
        read_record(_location(mlflow_server, "0" * 32), format="mlflow")
    assert "0" * 32 in str(err.value)


def test_experiment_and_tag_name_the_latest_run_of_the_night(mlflow_server, experiment):
    client = mlflow_server.client()
    where = f"experiments:/{experiment}?tag.night=2026-11-30&tracking_uri={mlflow_server.uri}"
    readiness = check_mlflow_run(where)
    assert not readiness.ready and readiness.missing == "run"  # no run yet: wait
    log_mlflow_night(client, experiment, night_points(0.1), tags={"night": "2026-11-29"})
    first = log_mlflow_night(client, experiment, night_points(0.8), tags={"night": "2026-11-30"}, status="FAILED")
    retry = log_mlflow_night(client, experiment, night_points(0.9), tags={"night": "2026-11-30"})
    assert first != retry
    readiness = check_mlflow_run(where)
    assert readiness.ready and readiness.location == f"runs:/{retry}?tracking_uri={mlflow_server.uri}"
    assert read_record(where, format="mlflow")["rollout/raw_reward"][0] == (0, 0.9)
    quoted = log_mlflow_night(client, experiment, night_points(0.7), tags={"job": "it's nightly"})
    by_job = f"experiments:/{experiment}?tracking_uri={mlflow_server.uri}&tag.job="
    found = check_mlflow_run(by_job + "it%27s%20nightly")
    assert found.ready and quoted in found.location
    with pytest.raises(RecordError, match="both ' and \" cannot be searched"):
        check_mlflow_run(by_job + "it%27s%20%22nightly%22")


@pytest.mark.parametrize("location", ["runs:/", "experiments:/x", "mlflow:/abc", "runs:/abc?color=red"])
def test_a_location_of_no_known_form_is_bad_input(location):
    with pytest.raises(RecordError):
        read_record(location + ("&" if "?" in location else "?") + "tracking_uri=http://127.0.0.1:9", format="mlflow")


def test_no_tracking_uri_is_bad_input(monkeypatch):
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    with pytest.raises(RecordError, match="no MLflow tracking URI"):
        read_record("runs:/abc", format="mlflow")


def _run(capsys, *argv):
    capsys.readouterr()  # MLflow's client prints a line when the test ends a run: not the command's output
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


def test_nights_gated_end_to_end_through_the_cli(capsys, tmp_path, store_url, mlflow_server, experiment, monkeypatch):
    monkeypatch.setenv("MLFLOW_TRACKING_URI", mlflow_server.uri)  # the location then needs no tracking_uri
    client = mlflow_server.client()
    gates = tmp_path / "gates.yaml"
    gates.write_text(GATES_YAML)

    def night(day, reward, *extra):
        tag = f"2026-11-{day:02d}"
        log_mlflow_night(client, experiment, night_points(reward), tags={"night": tag})
        return _run(capsys, "run", f"experiments:/{experiment}?tag.night={tag}", "--format", "mlflow",
                    "--gates", gates, "--series", "rl", "--store", store_url, "--run-id", f"night-{day}",
                    "--logical-date", f"{tag}T00:00:00Z", "--enforce", *extra)

    for day in range(1, 4):
        code, out, err = night(day, 0.8)
        assert code == 0, out + err
    code, out, err = night(4, 0.4, "--json")
    assert code == 1, err
    verdict = json.loads(out)
    assert verdict["counts"]["FAIL"] == 4 and verdict["results"][0]["side"] == "below"
    running = log_mlflow_night(client, experiment, night_points(0.8), status=None)
    code, out, err = _run(capsys, "run", f"runs:/{running}", "--format", "mlflow", "--gates", gates,
                          "--series", "rl", "--store", store_url, "--run-id", "night-5")
    assert code == 2 and "RUNNING" in err
    with open_store(store_url) as store:
        assert store.get_run("night-4").status == "untrusted"
        assert store.count("runs") == 4


# -- TrainingOutputSensor on an MLflow run: poke, reschedule and deferrable -------------------------


def _sensor(path, **kwargs):
    from airflow_metric_gate.sensors.training_output import TrainingOutputSensor

    kwargs.setdefault("poke_interval", 0.05)
    kwargs.setdefault("timeout", 60)
    return TrainingOutputSensor(task_id="wait_for_record", path=path, format="mlflow", **kwargs)


def test_poke_waits_for_the_run_to_finish_and_pushes_the_run_found(mlflow_server, experiment):
    client = mlflow_server.client()
    where = f"experiments:/{experiment}?tag.night=2026-11-30&tracking_uri={mlflow_server.uri}"
    sensor = _sensor(where)
    assert not sensor.poke({})  # no run yet
    run_id = log_mlflow_night(client, experiment, night_points(0.8), tags={"night": "2026-11-30"}, status=None)
    assert not sensor.poke({})  # RUNNING
    client.set_terminated(run_id)
    assert sensor.poke({}).xcom_value == _location(mlflow_server, run_id)


def test_reschedule_mode_frees_the_worker_while_the_run_is_running(mlflow_server, experiment):
    from datetime import datetime, timezone
    from unittest import mock

    from airflow.sdk.exceptions import AirflowRescheduleException

    client = mlflow_server.client()
    run_id = log_mlflow_night(client, experiment, night_points(0.8), status=None)
    sensor = _sensor(_location(mlflow_server, run_id), mode="reschedule", timeout=3600)
    ti = mock.Mock()
    ti.get_first_reschedule_date.return_value = None
    with pytest.raises(AirflowRescheduleException):
        sensor.execute({"ti": ti})
    client.set_terminated(run_id)
    ti.get_first_reschedule_date.return_value = datetime.now(timezone.utc)
    assert sensor.execute({"ti": ti}) == _location(mlflow_server, run_id)


def test_a_failed_run_fails_the_sensor_without_retry_in_every_mode(mlflow_server, experiment):
    import asyncio

    from airflow.sdk.exceptions import AirflowFailException, TaskDeferred

    client = mlflow_server.client()
    failed = log_mlflow_night(client, experiment, night_points(0.8), status="FAILED")
    with pytest.raises(AirflowFailException, match="the run ended FAILED"):
        _sensor(_location(mlflow_server, failed)).poke({})
    running = log_mlflow_night(client, experiment, night_points(0.8), status=None)
    sensor = _sensor(_location(mlflow_server, running), deferrable=True)
    with pytest.raises(TaskDeferred) as deferred:
        sensor.execute({})
    trigger = deferred.value.trigger

    async def collect():
        asyncio.get_running_loop().call_later(0.3, lambda: client.set_terminated(running, status="KILLED"))
        return [event async for event in trigger.run()]

    (event,) = asyncio.run(asyncio.wait_for(collect(), 60))
    assert event.payload["status"] == "bad_input" and "KILLED" in event.payload["message"]
    with pytest.raises(AirflowFailException, match="KILLED"):
        sensor.execute_complete({}, event.payload)


def test_deferrable_mode_resumes_when_the_run_finishes(mlflow_server, experiment):
    import asyncio

    from airflow.sdk.exceptions import TaskDeferred

    client = mlflow_server.client()
    run_id = log_mlflow_night(client, experiment, night_points(0.8), status=None)
    sensor = _sensor(_location(mlflow_server, run_id), deferrable=True)
    with pytest.raises(TaskDeferred) as deferred:
        sensor.execute({})

    async def collect():
        asyncio.get_running_loop().call_later(0.3, lambda: client.set_terminated(run_id))
        return [event async for event in deferred.value.trigger.run()]

    (event,) = asyncio.run(asyncio.wait_for(collect(), 60))
    assert event.payload == {"status": "success", "location": _location(mlflow_server, run_id)}
    assert sensor.execute_complete({}, event.payload) == _location(mlflow_server, run_id)


# -- the operators: ingest pins the run, persist refuses a run changed since ---------------------


def test_ingest_pins_the_run_and_a_run_changed_since_is_refused(mlflow_server, experiment):
    from airflow.sdk.exceptions import AirflowFailException

    from airflow_metric_gate.operators._record_copy import RecordChanged
    from airflow_metric_gate.operators.ingest import IngestRecordOperator, checked_record

    client = mlflow_server.client()
    run_id = log_mlflow_night(client, experiment, night_points(0.8))
    location = _location(mlflow_server, run_id)
    summary = IngestRecordOperator(task_id="ingest", location=location, format="mlflow").execute({})
    assert json.loads(json.dumps(summary)) == summary
    assert (summary["format"], summary["metrics"], summary["points"], summary["files"]) == ("mlflow", 2, 8, 1)
    record, from_copy = checked_record(location, None, "mlflow", summary["checksum"])
    assert record["train/grad_norm"] == [(s, 1.0) for s in range(4)] and not from_copy
    client.log_metric(run_id, "train/grad_norm", 5.0, step=9)  # logged after the night was ingested
    with pytest.raises(RecordChanged, match="changed after it was ingested"):
        checked_record(location, None, "mlflow", summary["checksum"])
    running = log_mlflow_night(client, experiment, night_points(0.8), status=None)
    with pytest.raises(AirflowFailException, match="RUNNING"):
        IngestRecordOperator(task_id="ingest", location=_location(mlflow_server, running),
                             format="mlflow").execute({})


def test_an_unreachable_tracking_server_is_an_outage_not_bad_input(capsys, tmp_path, monkeypatch):
    from _log_writers import free_port
    from airflow.sdk.exceptions import AirflowException, AirflowFailException

    from airflow_metric_gate.operators.ingest import IngestRecordOperator

    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "0")
    location = f"runs:/{'a' * 32}?tracking_uri=http://127.0.0.1:{free_port()}"  # nothing listens there
    gates = tmp_path / "gates.yaml"
    gates.write_text(GATES_YAML)
    code, _, err = _run(capsys, "run", location, "--format", "mlflow", "--gates", gates,
                        "--store", f"sqlite:///{tmp_path / 'store.db'}")
    assert code == 3 and "storage unavailable (retry later)" in err
    with pytest.raises(AirflowException) as raised:
        IngestRecordOperator(task_id="ingest", location=location, format="mlflow").execute({})
    assert not isinstance(raised.value, AirflowFailException)


def test_ingest_pins_the_run_an_experiment_location_names_and_keeps_an_env_uri_out(mlflow_server, experiment,
                                                                                    monkeypatch):
    from airflow_metric_gate.operators.ingest import IngestRecordOperator, checked_record

    monkeypatch.setenv("MLFLOW_TRACKING_URI", mlflow_server.uri)
    client = mlflow_server.client()
    night = log_mlflow_night(client, experiment, night_points(0.8), tags={"night": "2026-11-30"})
    where = f"experiments:/{experiment}?tag.night=2026-11-30"
    summary = IngestRecordOperator(task_id="ingest", location=where, format="mlflow").execute({})
    assert summary["location"] == f"runs:/{night}"  # pinned; the URI from the environment stays out
    assert check_mlflow_run(where).location == f"runs:/{night}"
    # the job starts another run with the same tag: the pinned night is still the one read
    log_mlflow_night(client, experiment, night_points(0.1), tags={"night": "2026-11-30"}, status=None)
    record, _ = checked_record(summary["location"], None, "mlflow", summary["checksum"])
    assert record["rollout/raw_reward"][0] == (0, 0.8)
