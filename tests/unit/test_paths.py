"""The text of a location: strings as given, path-like objects by their file system path, for every caller."""

from __future__ import annotations

from pathlib import Path

import pytest

from airflow_metric_gate.declarations import check_gates_file
from airflow_metric_gate.paths import location_text
from airflow_metric_gate.records import read_record
from airflow_metric_gate.store.sqlite import SQLiteStore


class _Location:
    """An ``os.PathLike`` that is not a pathlib object."""

    def __init__(self, path: str) -> None:
        self._path = path

    def __fspath__(self) -> str:
        return self._path


@pytest.mark.parametrize("text", ["/data/night", "relative/night.jsonl", "s3://bucket/night",
                                  "s3://aws_training@bucket/night", "file:///data/night", "", "  "])
def test_a_string_is_given_back_as_it_is(text):
    assert location_text(text) is text


def test_a_path_like_object_gives_its_file_system_path(tmp_path):
    assert location_text(tmp_path / "night") == str(tmp_path / "night")
    assert location_text(_Location("s3://bucket/night")) == "s3://bucket/night"


@pytest.mark.parametrize("location", [None, 3, ["/data/night"]])
def test_anything_else_is_a_type_error(location):
    with pytest.raises(TypeError):
        location_text(location)


def test_records_gates_files_and_stores_take_a_path_like_location(tmp_path):
    record = tmp_path / "night.jsonl"
    record.write_text('{"metric": "loss", "series": [[0, 1.5]]}\n')
    assert read_record(_Location(str(record))).metrics == {"loss": [(0, 1.5)]}
    assert read_record(record).sources == [str(record)]

    gates = tmp_path / "gates.yaml"
    gates.write_text("- metric_key: loss\n  steps: last\n  constraint: {rel_up: 0.05, rel_down: 0.05}\n")
    assert [d.metric_key for d in check_gates_file(_Location(str(gates)))] == ["loss"]

    store = SQLiteStore(_Location(str(tmp_path / "store.db")))
    assert store.path == str(tmp_path / "store.db")
    assert SQLiteStore(Path(":memory:")).path == ":memory:"
