"""The shared readiness check: is the record there and complete, and if not, what is missing."""

from __future__ import annotations

import pytest

from airflow_metric_gate.readiness import (
    MISSING_DATA,
    MISSING_MARKER,
    MISSING_RECORD,
    check_record,
    validate_marker,
)


def test_directory_with_marker_is_ready(tmp_path):
    (tmp_path / "rank0.jsonl").write_text("{}\n")
    (tmp_path / "_SUCCESS").touch()
    r = check_record(tmp_path)
    assert r.ready and r.missing is None
    assert r.location == str(tmp_path)
    assert r.marker == str(tmp_path / "_SUCCESS")


def test_file_marker_is_looked_for_beside_the_file(tmp_path):
    record = tmp_path / "metrics.jsonl"
    record.write_text("{}\n")
    assert check_record(record).missing == MISSING_MARKER
    (tmp_path / "_SUCCESS").touch()
    assert check_record(record).ready


def test_absent_record_is_reported_even_when_a_marker_is_there(tmp_path):
    (tmp_path / "_SUCCESS").touch()
    r = check_record(tmp_path / "metrics.jsonl")
    assert not r.ready and r.missing == MISSING_RECORD
    assert "does not exist" in r.reason and "is the record path right?" in r.reason


def test_custom_marker_name(tmp_path):
    record = tmp_path / "metrics.jsonl"
    record.write_text("{}\n")
    (tmp_path / "_SUCCESS").touch()
    assert check_record(record, marker="metrics.jsonl.done").missing == MISSING_MARKER
    (tmp_path / "metrics.jsonl.done").touch()
    assert check_record(record, marker="metrics.jsonl.done").ready


@pytest.mark.parametrize(
    ("files", "ready"),
    [
        ({}, False),
        ({"rank0.jsonl": ""}, False),  # empty data file
        ({"_SUCCESS": "x", ".hidden": "x", "rank0.jsonl.tmp": "x"}, False),  # only non-data files
        ({"rank0.jsonl": "{}\n"}, True),
    ],
)
def test_marker_off_directory_needs_a_non_empty_data_file(tmp_path, files, ready):
    for name, text in files.items():
        (tmp_path / name).write_text(text)
    r = check_record(tmp_path, marker=None)
    assert r.ready is ready
    assert r.marker is None
    if not ready:
        assert r.missing == MISSING_DATA
        assert "no non-empty record file" in r.reason


def test_marker_off_file_needs_content(tmp_path):
    record = tmp_path / "metrics.jsonl"
    record.write_text("")
    r = check_record(record, marker=None)
    assert (r.ready, r.missing) == (False, MISSING_DATA)
    assert "is empty" in r.reason
    record.write_text("{}\n")
    assert check_record(record, marker=None).ready


@pytest.mark.parametrize("bad", ["", "   ", "/abs/_SUCCESS", "s3://b/_SUCCESS", 3])
def test_unusable_marker_is_rejected(bad):
    with pytest.raises(ValueError, match="marker"):
        validate_marker(bad)
