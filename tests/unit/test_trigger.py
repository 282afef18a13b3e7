"""TrainingOutputTrigger: serializes to primitives and fires exactly one event."""

from __future__ import annotations

import asyncio
import importlib
import json
import time

from airflow_metric_gate.triggers.training_output import TrainingOutputTrigger


def _events(trigger: TrainingOutputTrigger, *, side_effect=None, timeout: float = 10) -> list:
    async def collect():
        if side_effect is not None:
            asyncio.get_running_loop().call_later(*side_effect)
        return [event async for event in trigger.run()]

    return asyncio.run(asyncio.wait_for(collect(), timeout))


def _complete_record(tmp_path):
    record = tmp_path / "night"
    record.mkdir()
    (record / "rank0.jsonl").write_text('{"metric": "m", "series": [[0, 1.0]]}\n')
    (record / "_SUCCESS").touch()
    return record


def test_serialize_round_trips_through_primitives():
    trigger = TrainingOutputTrigger(
        location="s3://bucket/nightly/2026-11-30",
        marker="DONE",
        storage_conn_id="aws_training",
        poke_interval=30.0,
        deadline=1_800_000_000.5,
        format="tensorboard",
    )
    classpath, kwargs = trigger.serialize()

    assert json.loads(json.dumps(kwargs)) == kwargs  # primitives only
    module, _, name = classpath.rpartition(".")
    rebuilt = getattr(importlib.import_module(module), name)(**kwargs)
    assert type(rebuilt) is TrainingOutputTrigger
    assert rebuilt.serialize() == (classpath, kwargs)
    assert kwargs == {
        "location": "s3://bucket/nightly/2026-11-30",
        "marker": "DONE",
        "storage_conn_id": "aws_training",
        "poke_interval": 30.0,
        "deadline": 1_800_000_000.5,
        "format": "tensorboard",
    }


def test_marker_none_survives_serialization():
    _, kwargs = TrainingOutputTrigger(location="/x", marker=None).serialize()
    assert kwargs["marker"] is None
    assert TrainingOutputTrigger(**kwargs).marker is None


def test_ready_record_yields_exactly_one_success_event(tmp_path):
    record = _complete_record(tmp_path)
    events = _events(TrainingOutputTrigger(location=str(record), poke_interval=0.01))
    assert [e.payload for e in events] == [{"status": "success", "location": str(record)}]


def test_object_storage_uri_is_checked_and_echoed(tmp_path):
    record = _complete_record(tmp_path)
    uri = f"file://{record}"
    events = _events(TrainingOutputTrigger(location=uri, poke_interval=0.01))
    assert [e.payload for e in events] == [{"status": "success", "location": uri}]


def test_waits_until_the_marker_lands(tmp_path):
    record = _complete_record(tmp_path)
    (record / "_SUCCESS").unlink()
    trigger = TrainingOutputTrigger(location=str(record), poke_interval=0.02, deadline=time.time() + 30)
    started = time.monotonic()
    events = _events(trigger, side_effect=(0.2, (record / "_SUCCESS").touch))
    assert time.monotonic() - started >= 0.2
    assert [e.payload["status"] for e in events] == ["success"]


def test_deadline_yields_one_timeout_event_saying_what_is_missing(tmp_path):
    record = _complete_record(tmp_path)
    (record / "_SUCCESS").unlink()
    trigger = TrainingOutputTrigger(location=str(record), poke_interval=0.02, deadline=time.time() + 0.1)
    (event,) = _events(trigger)
    assert event.payload["status"] == "timeout"
    assert event.payload["missing"] == "marker"
    assert event.payload["location"] == str(record)
    assert str(record / "_SUCCESS") in event.payload["message"]


def test_missing_record_timeout_names_the_record(tmp_path):
    trigger = TrainingOutputTrigger(location=str(tmp_path / "nope"), poke_interval=0.02, deadline=time.time())
    (event,) = _events(trigger)
    assert event.payload["status"] == "timeout"
    assert event.payload["missing"] == "record"
    assert f"{tmp_path / 'nope'} does not exist" in event.payload["message"]


def test_unreadable_storage_yields_one_error_event():
    trigger = TrainingOutputTrigger(location="nosuchscheme://bucket/key", poke_interval=0.01)
    (event,) = _events(trigger)
    assert event.payload["status"] == "error"
    assert "nosuchscheme://bucket/key" in event.payload["message"]
