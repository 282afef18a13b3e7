"""Records on object storage, against a real S3 API: a moto server on loopback (``s3_server``).

The sensor, the trigger and the operators read through the Airflow connection ``gate_s3`` (an
``aws`` connection with ``endpoint_url`` in its extras, set as ``AIRFLOW_CONN_GATE_S3``); the CLI
runs as a process of its own, with nothing but that environment.
"""

from __future__ import annotations

import asyncio
import json
import threading
from datetime import datetime, timezone
from unittest import mock

import pytest
from airflow.sdk.exceptions import (
    AirflowRescheduleException,
    AirflowSensorTimeout,
    TaskDeferred,
)

from airflow_metric_gate.sensors.training_output import TrainingOutputSensor

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
