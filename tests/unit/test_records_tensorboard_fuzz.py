"""The event-file reader under generated input: hand decoding agrees with protobuf, damage is always bad input."""

from __future__ import annotations

import math
import struct

import pytest

pytest.importorskip("crc32c")
pytest.importorskip("tensorboard")

from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402
from tensorboard.compat.proto.event_pb2 import Event  # noqa: E402
from tensorboard.compat.proto.summary_pb2 import Summary  # noqa: E402

from airflow_metric_gate.formats import tensorboard  # noqa: E402
from airflow_metric_gate.records import RecordError, read_record  # noqa: E402

# Scalars as a trainer logs them: a tag (any text, short or longer than one length byte), a step
# (negative ones included, as int64 allows), a 32-bit float (NaN and infinities included).
tags = st.one_of(st.sampled_from(["loss", "train/grad_norm", "rollout/raw_reward"]), st.text(min_size=1, max_size=200))
steps = st.one_of(st.integers(0, 300), st.integers(-(2**63), 2**63 - 1))
values = st.floats(width=32, allow_nan=True, allow_infinity=True)
scalars = st.lists(st.tuples(tags, steps, values), min_size=1, max_size=30)


def _frame(data: bytes) -> bytes:
    from crc32c import crc32c

    def masked(b: bytes) -> bytes:
        crc = crc32c(b)
        return struct.pack("<I", (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF)

    header = struct.pack("<Q", len(data))
    return header + masked(header) + data + masked(data)


def _event_file(path, events) -> bytes:
    data = _frame(Event(wall_time=1.0, file_version="brain.Event:2").SerializeToString())
    for tag, step, value in events:
        event = Event(wall_time=2.0, step=step, summary=Summary(value=[Summary.Value(tag=tag, simple_value=value)]))
        data += _frame(event.SerializeToString())
    path.write_bytes(data)
    return data


def _key(points):
    return [(s, "nan" if isinstance(v, float) and math.isnan(v) else v) for s, v in points]


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(events=scalars)
def test_hand_decoding_agrees_with_protobuf_and_with_what_was_logged(tmp_path_factory, events):
    path = tmp_path_factory.mktemp("events") / "events.out.tfevents.1.host"
    _event_file(path, events)
    fast = read_record(path, format="tensorboard")
    original = tensorboard._FAST_PATH
    tensorboard._FAST_PATH = False
    try:
        slow = read_record(path, format="tensorboard")
    finally:
        tensorboard._FAST_PATH = original
    assert list(fast) == list(slow)
    assert all(_key(fast[m]) == _key(slow[m]) for m in fast)
    assert repr(fast.invalid_steps) == repr(slow.invalid_steps)  # repr: NaN equal to NaN
    # every scalar logged is there: at its step (a later one at the same step wins), or step-less when negative
    for tag in {t for t, _, _ in events}:
        logged = {}
        for t, step, value in events:
            if t == tag and step >= 0:
                logged.pop(step, None)
                logged[step] = value
        stepped = [(s, v) for s, v in fast[tag] if s is not None]
        assert _key(stepped) == _key(sorted(logged.items()))
        negatives = [v for t, s, v in events if t == tag and s < 0]
        assert len([s for s, _ in fast[tag] if s is None]) == len(negatives)


@pytest.mark.slow
@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(events=scalars, data=st.data())
def test_damage_is_bad_input_naming_a_record_offset_never_a_crash(tmp_path_factory, events, data):
    path = tmp_path_factory.mktemp("events") / "events.out.tfevents.1.host"
    content = bytearray(_event_file(path, events))
    if data.draw(st.booleans(), label="truncate"):
        cut = data.draw(st.integers(1, len(content) - 1), label="cut")
        content = content[:cut]
    else:
        at = data.draw(st.integers(0, len(content) - 1), label="at")
        content[at] ^= data.draw(st.integers(1, 255), label="flip")
    path.write_bytes(bytes(content))
    try:
        read_record(path, format="tensorboard")
    except RecordError as err:
        assert err.path == str(path) and "record at byte offset" in str(err)
