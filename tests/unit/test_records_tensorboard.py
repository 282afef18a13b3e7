"""The tensorboard record format: event files written by tensorboardX, read exactly (issue 21)."""

from __future__ import annotations

import math
import struct

import pytest

pytest.importorskip("tensorboardX")
pytest.importorskip("crc32c")

from _log_writers import night_points, write_tensorboard_night  # noqa: E402
from tensorboardX import SummaryWriter  # noqa: E402

from airflow_metric_gate.declarations.resolution import declare  # noqa: E402
from airflow_metric_gate.formats import tensorboard  # noqa: E402
from airflow_metric_gate.readiness import check_record  # noqa: E402
from airflow_metric_gate.records import RecordError, read_record  # noqa: E402
from airflow_metric_gate.selection import select_steps  # noqa: E402


def _f32(x: float) -> float:
    return struct.unpack("<f", struct.pack("<f", x))[0]


def _same(a, b) -> bool:
    """Points equal, NaN equal to NaN."""
    return len(a) == len(b) and all(
        sa == sb and (va == vb or (isinstance(va, float) and math.isnan(va) and math.isnan(vb)))
        for (sa, va), (sb, vb) in zip(a, b)
    )


def _event_file(folder):
    (file,) = [p for p in folder.iterdir() if "tfevents" in p.name]
    return file


def test_every_scalar_of_every_tag_is_read_as_the_writer_stored_it(tmp_path):
    write_tensorboard_night(tmp_path, night_points(0.8))
    record = read_record(tmp_path, format="tensorboard")
    assert list(record) == ["rollout/raw_reward", "train/grad_norm"]
    assert record["rollout/raw_reward"] == [(s, _f32(0.8 + 0.01 * s)) for s in range(4)]
    assert record["train/grad_norm"] == [(s, 1.0) for s in range(4)]
    assert [name for name, _ in record.skipped] == [str(tmp_path / "_SUCCESS")]


@pytest.mark.slow
def test_more_than_ten_thousand_points_per_tag_are_all_kept(tmp_path):
    writer = SummaryWriter(str(tmp_path))
    for step in range(25_000):
        writer.add_scalar("loss", step / 1000, step)
    writer.close()
    record = read_record(tmp_path, format="tensorboard")
    assert len(record["loss"]) == 25_000
    assert record["loss"][-1] == (24_999, _f32(24.999))


def test_a_nan_logged_is_a_non_finite_value_and_errs_under_all(tmp_path):
    writer = SummaryWriter(str(tmp_path))
    for step, value in enumerate([0.5, float("nan"), 0.7]):
        writer.add_scalar("loss", value, step)
    writer.close()
    record = read_record(tmp_path, format="tensorboard")
    steps = [s for s, _ in record["loss"]]
    assert steps == [0, 1, 2] and math.isnan(record["loss"][1][1])
    declaration = declare(metric_key="loss", steps="all", constraint={"rel_up": 0.1, "rel_down": 0.1})
    (selection,) = select_steps(record, [declaration])
    assert selection.error == "metric 'loss': step 1 is not finite: nan"


def test_a_step_logged_again_in_one_file_replaces_the_earlier_point(tmp_path):
    writer = SummaryWriter(str(tmp_path))
    for step in (0, 1, 2, 3):
        writer.add_scalar("loss", float(step), step)
    writer.add_scalar("loss", 9.0, 2)  # a resumed loop logs step 2 again
    writer.close()
    assert read_record(tmp_path, format="tensorboard")["loss"] == [(0, 0.0), (1, 1.0), (2, 9.0), (3, 3.0)]


def test_event_files_of_several_ranks_merge_as_json_lines_files_do(tmp_path):
    for rank, steps in ((0, (0, 2)), (1, (1, 3))):
        writer = SummaryWriter(str(tmp_path), filename_suffix=f".rank{rank}")
        for step in steps:
            writer.add_scalar("loss", float(step), step)
        writer.add_scalar(f"rank{rank}/only", 1.0, 0)
        writer.close()
    record = read_record(tmp_path, format="tensorboard")
    assert record["loss"] == [(0, 0.0), (1, 1.0), (2, 2.0), (3, 3.0)]
    assert set(record) == {"loss", "rank0/only", "rank1/only"}
    assert len(record.sources) == 2


def test_a_negative_step_is_step_less_and_named(tmp_path):
    writer = SummaryWriter(str(tmp_path))
    writer.add_scalar("loss", 0.5, 0)
    writer.add_scalar("loss", 0.25, -3)
    writer.close()
    record = read_record(tmp_path, format="tensorboard")
    assert record["loss"] == [(0, 0.5), (None, 0.25)]
    ((step, value, file, position),) = record.invalid_steps["loss"]
    assert (step, value) == (-3, 0.25) and file.endswith(_event_file(tmp_path).name)
    assert position == "event record 3"  # the file version event, then the two scalars
    declaration = declare(metric_key="loss", steps="all", constraint={"rel_up": 0.1, "rel_down": 0.1})
    (selection,) = select_steps(record, [declaration])
    assert f"point [-3, 0.25] ({file} event record 3) has a step that is not an int >= 0" in selection.error


def test_other_summaries_and_files_are_ignored(tmp_path):
    writer = SummaryWriter(str(tmp_path))
    writer.add_scalar("loss", 0.5, 0)
    writer.add_text("notes", "hello", 0)
    writer.add_histogram("weights", [1.0, 2.0, 3.0], 0)
    writer.close()
    (tmp_path / "hparams.yaml").write_text("lr: 0.1\n")
    record = read_record(tmp_path, format="tensorboard")
    assert list(record) == ["loss"]
    assert any(name.endswith("hparams.yaml") and "tfevents" in reason for name, reason in record.skipped)


def test_hand_decoding_gives_what_protobuf_gives(tmp_path, monkeypatch):
    writer = SummaryWriter(str(tmp_path))
    for step in (0, 1, 127, 128, 300, 2**40):
        writer.add_scalar("a/" + "x" * 150, step * 0.5, step)  # a tag longer than one length byte
        writer.add_scalar("loss", float("nan") if step == 300 else step * 0.25, step)
    writer.add_scalar("loss", 2.0, -1)
    writer.close()
    fast = read_record(tmp_path, format="tensorboard")
    monkeypatch.setattr(tensorboard, "_FAST_PATH", False)
    slow = read_record(tmp_path, format="tensorboard")
    assert list(fast) == list(slow)
    for metric in fast:
        assert _same(fast[metric], slow[metric])
    assert fast.invalid_steps == slow.invalid_steps


def test_tensor_scalars_as_tensorflow_writes_them_are_read(tmp_path):
    # tf.summary.scalar writes a rank-0 float tensor; the 'scalars' plugin is named on the first value only.
    event = tensorboard._event_class()
    records = []
    for step, value in ((0, 0.5), (1, 0.75)):
        msg = event(step=step, wall_time=1.0)
        v = msg.summary.value.add(tag="tf/loss")
        v.tensor.dtype = 1
        v.tensor.tensor_content = struct.pack("<f", value)
        if step == 0:
            v.metadata.plugin_data.plugin_name = "scalars"
        text = msg.summary.value.add(tag="tf/text")
        text.tensor.dtype = 7  # DT_STRING
        text.metadata.plugin_data.plugin_name = "text"
        records.append(msg.SerializeToString())
    path = tmp_path / "events.out.tfevents.1.host"
    path.write_bytes(b"".join(_frame(data) for data in records))
    assert read_record(path, format="tensorboard").metrics == {"tf/loss": [(0, 0.5), (1, 0.75)]}


def _frame(data: bytes) -> bytes:
    from crc32c import crc32c

    def masked(b: bytes) -> bytes:
        crc = crc32c(b)
        return struct.pack("<I", (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF)

    header = struct.pack("<Q", len(data))
    return header + masked(header) + data + masked(data)


def test_a_truncated_event_file_is_bad_input_naming_file_and_offset(tmp_path):
    write_tensorboard_night(tmp_path, night_points(0.8), marker=False)
    file = _event_file(tmp_path)
    data = file.read_bytes()
    file.write_bytes(data[:-7])
    with pytest.raises(RecordError) as err:
        read_record(tmp_path, format="tensorboard")
    assert err.value.path == str(file)
    assert "truncated" in str(err.value) and "byte offset" in str(err.value)
    offset = int(str(err.value).split("byte offset ")[1].split(":")[0])
    assert 0 < offset < len(data) - 7 and struct.unpack_from("<Q", data, offset)[0] == len(data) - offset - 16


def test_a_corrupted_record_fails_its_crc_at_its_offset(tmp_path):
    write_tensorboard_night(tmp_path, night_points(0.8), marker=False)
    file = _event_file(tmp_path)
    data = bytearray(file.read_bytes())
    first = struct.unpack_from("<Q", data, 0)[0] + 16  # the second record starts here
    data[first + 12 + 3] ^= 0xFF
    file.write_bytes(bytes(data))
    with pytest.raises(RecordError, match=rf"record at byte offset {first}: corrupted: the CRC of the record data"):
        read_record(file, format="tensorboard")


def test_a_header_cut_short_is_truncated(tmp_path):
    path = tmp_path / "events.out.tfevents.2.host"
    path.write_bytes(_frame(b"") + b"\x05\x00\x00")
    with pytest.raises(RecordError, match=r"record at byte offset 16: truncated: the file ends 3 byte"):
        read_record(path, format="tensorboard")


def test_a_directory_without_event_files_is_bad_input(tmp_path):
    (tmp_path / "notes.txt").write_text("x")
    with pytest.raises(RecordError, match="only event files"):
        read_record(tmp_path, format="tensorboard")


def test_readiness_waits_for_the_marker_or_an_event_file(tmp_path):
    (tmp_path / "hparams.yaml").write_text("lr: 0.1\n")
    assert check_record(tmp_path, marker=None, format="tensorboard").missing == "data"
    write_tensorboard_night(tmp_path, night_points(0.8), marker=False)
    assert check_record(tmp_path, format="tensorboard").missing == "marker"
    assert check_record(tmp_path, marker=None, format="tensorboard").ready
    (tmp_path / "_SUCCESS").touch()
    assert check_record(tmp_path, format="tensorboard").ready


def test_tensorboards_own_writer_with_tensor_scalars_is_read(tmp_path):
    """TensorBoard's EventFileWriter and its scalars plugin: the summary form TensorFlow 2 writes."""
    pytest.importorskip("tensorboard")
    from tensorboard.compat.proto.event_pb2 import Event
    from tensorboard.plugins.scalar.summary_v2 import scalar_pb
    from tensorboard.summary.writer.event_file_writer import EventFileWriter

    writer = EventFileWriter(str(tmp_path))
    for step, value in ((0, 0.25), (1, float("inf")), (2, 0.75)):
        writer.add_event(Event(wall_time=1.0 + step, step=step, summary=scalar_pb("tf/loss", value)))
    writer.close()
    points = read_record(tmp_path, format="tensorboard")["tf/loss"]
    assert points == [(0, 0.25), (1, float("inf")), (2, 0.75)]
