"""TrainingOutputSensor on TensorBoard and CSV records: the completion marker in every mode (issue 21)."""

from __future__ import annotations

import asyncio
from datetime import datetime, timezone
from unittest import mock

import pytest
from _log_writers import night_points, write_lightning_csv
from airflow.sdk.exceptions import AirflowFailException, AirflowRescheduleException, TaskDeferred

from airflow_metric_gate.sensors.training_output import TrainingOutputSensor


def _tensorboard_night(folder, *, marker: bool):
    pytest.importorskip("tensorboardX")
    from _log_writers import write_tensorboard_night

    folder.mkdir(exist_ok=True)
    return write_tensorboard_night(folder, night_points(0.8), marker=marker)


def _csv_night(folder, *, marker: bool):
    write_lightning_csv(folder / "metrics.csv", night_points(0.8))
    if marker:
        (folder / "_SUCCESS").touch()
    return folder


WRITERS = {"tensorboard": _tensorboard_night, "csv": _csv_night}


def _sensor(path, **kwargs) -> TrainingOutputSensor:
    kwargs.setdefault("poke_interval", 0.01)
    kwargs.setdefault("timeout", 0.05)
    return TrainingOutputSensor(task_id="wait_for_record", path=path, **kwargs)


@pytest.mark.parametrize("format", WRITERS)
def test_poke_waits_for_the_marker_of_a_log_folder(tmp_path, format):
    record = WRITERS[format](tmp_path / "night", marker=False)
    sensor = _sensor(str(record), format=format)
    assert not sensor.poke({})
    (record / "_SUCCESS").touch()
    assert sensor.poke({}).xcom_value == str(record)


@pytest.mark.parametrize("format", WRITERS)
def test_marker_off_waits_for_a_log_file_of_the_format(tmp_path, format):
    record = tmp_path / "night"
    record.mkdir()
    (record / "hparams.yaml").write_text("lr: 0.1\n")  # present, but not a log of the format
    sensor = _sensor(str(record), format=format, marker=None)
    assert not sensor.poke({})
    WRITERS[format](record, marker=False)
    assert sensor.poke({})


@pytest.mark.parametrize("format", WRITERS)
def test_reschedule_mode_frees_the_worker_until_the_marker_lands(tmp_path, format):
    record = WRITERS[format](tmp_path / "night", marker=False)
    sensor = _sensor(str(record), format=format, mode="reschedule", timeout=3600)
    ti = mock.Mock()
    ti.get_first_reschedule_date.return_value = None
    with pytest.raises(AirflowRescheduleException):
        sensor.execute({"ti": ti})
    (record / "_SUCCESS").touch()
    ti.get_first_reschedule_date.return_value = datetime.now(timezone.utc)
    assert sensor.execute({"ti": ti}) == str(record)


@pytest.mark.parametrize("format", WRITERS)
def test_deferrable_mode_hands_the_format_to_the_trigger_which_waits_for_the_marker(tmp_path, format):
    record = WRITERS[format](tmp_path / "night", marker=False)
    sensor = _sensor(f"file://{record}", format=format, deferrable=True, poke_interval=0.05, timeout=30)
    with pytest.raises(TaskDeferred) as deferred:
        sensor.execute({})
    trigger = deferred.value.trigger
    assert trigger.serialize()[1]["format"] == format

    async def collect():
        asyncio.get_running_loop().call_later(0.2, (record / "_SUCCESS").touch)
        return [event async for event in trigger.run()]

    (event,) = asyncio.run(asyncio.wait_for(collect(), 20))
    assert event.payload == {"status": "success", "location": f"file://{record}"}
    assert sensor.execute_complete({}, event.payload) == f"file://{record}"


def test_unknown_format_fails_without_retry(tmp_path):
    with pytest.raises(AirflowFailException, match="format must be one of series, rows, tensorboard, mlflow, csv"):
        _sensor(str(tmp_path), format="parquet").poke({})


def test_an_mlflow_timeout_says_the_run_did_not_finish():
    from airflow.sdk.exceptions import AirflowSensorTimeout

    sensor = _sensor("runs:/abc", format="mlflow", deferrable=True, timeout=3600)
    event = {"status": "timeout", "location": "runs:/abc", "missing": "finish",
             "message": "MLflow run abc is RUNNING: a run is gated once it is FINISHED"}
    with pytest.raises(AirflowSensorTimeout, match=r"Timed out after 3600s waiting for the MLflow run: MLflow run abc "
                                                   r"is RUNNING.*ended \(status FINISHED\)"):
        sensor.execute_complete({}, event)


def test_bad_input_event_fails_without_retry():
    sensor = _sensor("runs:/abc", format="mlflow", deferrable=True)
    with pytest.raises(AirflowFailException, match="the run ended FAILED"):
        sensor.execute_complete({}, {"status": "bad_input", "location": "runs:/abc",
                                     "message": "MLflow run abc: the run ended FAILED"})
