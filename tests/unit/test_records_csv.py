"""The csv record format: Lightning CSVLogger's metrics.csv layout (issue 21)."""

from __future__ import annotations

import math

import pytest
from _log_writers import night_points, write_lightning_csv
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from airflow_metric_gate.readiness import check_record
from airflow_metric_gate.records import RecordError, read_record


def test_lightning_layout_reads_every_logged_cell(tmp_path):
    path = write_lightning_csv(tmp_path / "metrics.csv", night_points(0.8))
    assert path.read_text().splitlines()[0] == "rollout/raw_reward,train/grad_norm,epoch,step"
    record = read_record(path, format="csv")
    assert list(record) == ["rollout/raw_reward", "train/grad_norm", "epoch"]
    assert record["rollout/raw_reward"] == [(s, 0.8 + 0.01 * s) for s in range(4)]
    assert record["train/grad_norm"] == [(s, 1.0) for s in range(4)]
    assert record["epoch"] == [(0, 0), (1, 0), (2, 1), (3, 1)]  # one point per step, the later row kept
    assert all(type(value) is int for _, value in record["epoch"])  # ints stay ints


def test_empty_cells_are_not_points_and_nan_stays_nan(tmp_path):
    path = tmp_path / "metrics.csv"
    path.write_text("epoch,step,train/loss,val/loss\n0,49,0.91,\n0,49,,nan\n1,99,0.62,\n")
    record = read_record(path, format="csv")
    assert record["train/loss"] == [(49, 0.91), (99, 0.62)]
    ((step, value),) = record["val/loss"]
    assert step == 49 and math.isnan(value)


def test_a_step_logged_again_replaces_the_earlier_row(tmp_path):
    path = tmp_path / "metrics.csv"
    path.write_text("step,loss\n0,1.0\n1,0.9\n2,0.8\n1,0.5\n")  # resumed from step 1, appending
    assert read_record(path, format="csv")["loss"] == [(0, 1.0), (1, 0.5), (2, 0.8)]


def test_steps_that_are_not_ints_make_step_less_points_named_by_line(tmp_path):
    path = tmp_path / "metrics.csv"
    path.write_text("step,loss\n0,1.0\n3.0,0.9\n,0.7\n")
    record = read_record(path, format="csv")
    assert record["loss"] == [(0, 1.0), (None, 0.9), (None, 0.7)]
    assert record.invalid_steps["loss"] == [("3.0", 0.9, str(path), 3)]


def test_text_that_is_not_a_number_is_kept_for_selection_to_drop(tmp_path):
    path = tmp_path / "metrics.csv"
    path.write_text("step,loss\n0,oops\n1,0.5\n2,1_0\n")
    assert read_record(path, format="csv")["loss"] == [(0, "oops"), (1, 0.5), (2, "1_0")]


def test_no_step_column_is_bad_input_naming_file_and_columns(tmp_path):
    path = tmp_path / "metrics.csv"
    path.write_text("epoch,global,loss\n0,1,0.5\n")
    with pytest.raises(RecordError) as err:
        read_record(path, format="csv")
    assert err.value.path == str(path) and err.value.line == 1
    assert "no 'step' column" in str(err.value) and "'global'" in str(err.value)


def test_a_row_longer_than_the_header_is_bad_input_naming_its_line(tmp_path):
    path = tmp_path / "metrics.csv"
    path.write_text("step,loss\n0,0.5\n1,0.4,9\n")
    with pytest.raises(RecordError, match=r"metrics.csv:3: the row has 3 cells"):
        read_record(path, format="csv")


def test_a_version_folder_reads_its_csv_files_and_skips_the_rest(tmp_path):
    write_lightning_csv(tmp_path / "metrics.csv", night_points(0.8))
    (tmp_path / "hparams.yaml").write_text("lr: 0.1\n")
    record = read_record(tmp_path, format="csv")
    assert record.sources == [str(tmp_path / "metrics.csv")]
    assert [reason for _, reason in record.skipped] == ["not a CSV log: the name does not end with '.csv'"]
    assert check_record(tmp_path, format="csv").missing == "marker"
    assert check_record(tmp_path, marker=None, format="csv").ready


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(head=st.sampled_from([b"step,loss\n", b"epoch,step,a,b\n", b""]), body=st.binary(max_size=300))
def test_any_bytes_read_or_are_bad_input_naming_the_file(tmp_path_factory, head, body):
    path = tmp_path_factory.mktemp("csv") / "metrics.csv"
    path.write_bytes(head + body)
    try:
        record = read_record(path, format="csv")
    except RecordError as err:
        assert err.path == str(path)
    else:
        assert all(step is None or (type(step) is int and step >= 0) for m in record for step, _ in record[m])
