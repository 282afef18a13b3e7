"""TrainingOutputSensor: poke, reschedule and deferrable modes, timeout messages, XCom hand-off."""

from __future__ import annotations

import json
import time
from datetime import datetime, timedelta, timezone
from unittest import mock

import pytest
from airflow.sdk.exceptions import (
    AirflowException,
    AirflowFailException,
    AirflowRescheduleException,
    AirflowSensorTimeout,
    AirflowSkipException,
    TaskDeferred,
)

from airflow_metric_gate.sensors.training_output import TrainingOutputSensor
from airflow_metric_gate.triggers.training_output import TrainingOutputTrigger


def _night(tmp_path, *, marker: bool = True):
    record = tmp_path / "2026-11-30"
    record.mkdir()
    (record / "rank0.jsonl").write_text('{"metric": "m", "series": [[0, 1.0]]}\n')
    if marker:
        (record / "_SUCCESS").touch()
    return record


def _sensor(path, **kwargs) -> TrainingOutputSensor:
    kwargs.setdefault("poke_interval", 0.01)
    kwargs.setdefault("timeout", 0.05)
    return TrainingOutputSensor(task_id="wait_for_record", path=path, **kwargs)


# -- poke ---------------------------------------------------------------------------------------


def test_complete_directory_pokes_true_with_location_as_xcom(tmp_path):
    record = _night(tmp_path)
    result = _sensor(str(record)).poke({})
    assert result.is_done
    assert result.xcom_value == str(record)


def test_directory_without_marker_pokes_false(tmp_path):
    assert not _sensor(str(_night(tmp_path, marker=False))).poke({})


def test_file_record_needs_marker_beside_it(tmp_path):
    record = tmp_path / "metrics.jsonl"
    record.write_text("{}\n")
    sensor = _sensor(str(record))
    assert not sensor.poke({})
    (tmp_path / "_SUCCESS").touch()
    assert sensor.poke({}).xcom_value == str(record)


def test_absent_record_pokes_false(tmp_path):
    assert not _sensor(str(tmp_path / "missing")).poke({})


def test_configured_marker_name(tmp_path):
    record = _night(tmp_path)  # has _SUCCESS, but the job writes DONE
    sensor = _sensor(str(record), marker="DONE")
    assert not sensor.poke({})
    (record / "DONE").touch()
    assert sensor.poke({})


def test_marker_off_accepts_non_empty_record_only(tmp_path):
    record = tmp_path / "metrics.jsonl"
    record.write_text("")
    sensor = _sensor(str(record), marker=None)
    assert not sensor.poke({})
    record.write_text("{}\n")
    assert sensor.poke({}).xcom_value == str(record)


def test_marker_off_empty_directory_pokes_false(tmp_path):
    record = tmp_path / "night"
    record.mkdir()
    (record / "_SUCCESS").touch()  # a marker is not data
    assert not _sensor(str(record), marker=None).poke({})


def test_object_storage_uri_with_file_scheme(tmp_path):
    record = _night(tmp_path)
    uri = f"file://{record}"
    result = _sensor(uri).poke({})
    assert result.is_done and result.xcom_value == uri


def test_pathlike_path_is_accepted(tmp_path):
    record = _night(tmp_path)
    assert _sensor(record).poke({}).xcom_value == str(record)


def test_bad_marker_fails_without_retry(tmp_path):
    with pytest.raises(AirflowFailException, match="marker"):
        _sensor(str(tmp_path), marker="").poke({})


def test_construction_does_no_io_or_validation_of_templated_values(tmp_path):
    sensor = _sensor("{{ params.root }}/{{ ds }}", marker="{{ params.marker }}")
    assert sensor.path == "{{ params.root }}/{{ ds }}"
    assert sensor.marker == "{{ params.marker }}"


def test_path_and_marker_are_templated(tmp_path):
    record = _night(tmp_path)
    (record / "DONE").touch()
    sensor = _sensor("{{ params.root }}/{{ ds }}", marker="{{ params.marker }}")
    assert {"path", "marker", "storage_conn_id"} <= set(sensor.template_fields)
    sensor.render_template_fields({"ds": "2026-11-30", "params": {"root": str(tmp_path), "marker": "DONE"}})
    assert sensor.path == str(record)
    assert sensor.poke({}).xcom_value == str(record)


# -- poke mode execute -------------------------------------------------------------------------


def test_execute_returns_the_location_for_xcom(tmp_path):
    record = _night(tmp_path)
    value = _sensor(str(record)).execute({})
    assert value == str(record)
    assert json.loads(json.dumps(value)) == value


def test_timeout_names_path_and_missing_marker(tmp_path):
    record = _night(tmp_path, marker=False)
    with pytest.raises(AirflowSensorTimeout) as err:
        _sensor(str(record)).execute({})
    message = str(err.value)
    assert str(record) in message
    assert f"completion marker {record / '_SUCCESS'} does not" in message


def test_timeout_names_absent_record(tmp_path):
    with pytest.raises(AirflowSensorTimeout, match=r"the record .*missing does not exist"):
        _sensor(str(tmp_path / "missing")).execute({})


def test_timeout_with_soft_fail_skips(tmp_path):
    with pytest.raises(AirflowSkipException):
        _sensor(str(tmp_path / "missing"), soft_fail=True).execute({})


# -- reschedule mode ---------------------------------------------------------------------------


def _reschedule_context(first_try: datetime | None):
    ti = mock.Mock()
    ti.get_first_reschedule_date.return_value = first_try
    return {"ti": ti}


def test_reschedule_mode_frees_the_worker_while_waiting(tmp_path):
    record = _night(tmp_path, marker=False)
    sensor = _sensor(str(record), mode="reschedule", timeout=3600)
    with pytest.raises(AirflowRescheduleException):
        sensor.execute(_reschedule_context(None))
    (record / "_SUCCESS").touch()
    assert sensor.execute(_reschedule_context(datetime.now(timezone.utc))) == str(record)


def test_reschedule_mode_timeout_names_what_is_missing(tmp_path):
    record = _night(tmp_path, marker=False)
    sensor = _sensor(str(record), mode="reschedule", timeout=60)
    long_ago = datetime.now(timezone.utc) - timedelta(hours=2)
    with pytest.raises(AirflowSensorTimeout, match="completion marker .*_SUCCESS does not"):
        sensor.execute(_reschedule_context(long_ago))


# -- deferrable mode ---------------------------------------------------------------------------


def test_deferrable_returns_at_once_when_ready(tmp_path):
    record = _night(tmp_path)
    assert _sensor(str(record), deferrable=True).execute({}) == str(record)


def test_deferrable_defers_to_the_trigger_when_not_ready(tmp_path):
    record = _night(tmp_path, marker=False)
    sensor = _sensor(f"file://{record}", deferrable=True, marker="DONE", poke_interval=30, timeout=600)
    before = time.time()
    with pytest.raises(TaskDeferred) as deferred:
        sensor.execute({})
    trigger = deferred.value.trigger
    assert isinstance(trigger, TrainingOutputTrigger)
    assert deferred.value.method_name == "execute_complete"
    assert trigger.location == f"file://{record}"
    assert trigger.marker == "DONE"
    assert trigger.poke_interval == 30
    assert before + 600 <= trigger.deadline <= time.time() + 600
    # Airflow's own deferral timeout is only a backstop behind the trigger's deadline.
    assert deferred.value.timeout > timedelta(seconds=600)


def test_execute_complete_success_returns_location():
    sensor = _sensor("/x", deferrable=True)
    assert sensor.execute_complete({}, {"status": "success", "location": "s3://b/night"}) == "s3://b/night"


def test_execute_complete_timeout_fails_with_the_reason():
    sensor = _sensor("/data/night", deferrable=True, timeout=3600)
    event = {
        "status": "timeout",
        "location": "/data/night",
        "missing": "record",
        "message": "the record /data/night does not exist",
    }
    with pytest.raises(AirflowSensorTimeout) as err:
        sensor.execute_complete({}, event)
    assert "Timed out after 3600s waiting for the training record: the record /data/night does not exist" in str(
        err.value
    )


def test_execute_complete_error_is_retryable():
    sensor = _sensor("/data/night", deferrable=True)
    with pytest.raises(AirflowException, match="permission denied") as err:
        sensor.execute_complete({}, {"status": "error", "location": "/data/night", "message": "permission denied"})
    assert not isinstance(err.value, (AirflowFailException, AirflowSensorTimeout))
