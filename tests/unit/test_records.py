"""Record reading (SPEC 2): one test per rule, each asserting what a user sees."""

from __future__ import annotations

import json
import math
import pickle

import pytest

from airflow_metric_gate.records import Record, RecordError, merge_lines, read_record
from airflow_metric_gate.schemas.records import RecordLineSchema, load_series_line


def _write(path, *lines):
    """Write JSON lines (dicts are dumped, strings written verbatim)."""
    path.write_text("".join((line if isinstance(line, str) else json.dumps(line)) + "\n" for line in lines))
    return path


def _error(location, **kwargs) -> RecordError:
    with pytest.raises(RecordError) as info:
        read_record(location, **kwargs)
    return info.value


# -- single file -------------------------------------------------------------------------------


def test_single_file_keeps_points_and_first_seen_metric_order(tmp_path):
    path = _write(
        tmp_path / "record.jsonl",
        {"metric": "z/second", "series": [[0, 0.2], [1, 0.4]]},
        {"metric": "a/first", "series": [[5, 1], [3, 2.5]]},
    )
    record = read_record(path)
    assert isinstance(record, Record)
    assert list(record.metrics) == ["z/second", "a/first"]
    assert record["z/second"] == [(0, 0.2), (1, 0.4)]
    assert record["a/first"] == [(5, 1), (3, 2.5)]  # a single file is not re-sorted
    assert "a/first" in record and "missing" not in record
    assert len(record) == 2 and record.point_count() == 4
    assert record.sources == [str(path)]


def test_accepts_str_and_uri_locations(tmp_path):
    path = _write(tmp_path / "record.jsonl", {"metric": "m", "series": [[0, 1.0]]})
    assert read_record(str(path))["m"] == [(0, 1.0)]
    assert read_record(f"file://{path}")["m"] == [(0, 1.0)]


def test_markers_decode_to_non_finite_floats_in_value_position(tmp_path):
    path = _write(
        tmp_path / "record.jsonl",
        {"metric": "m", "series": [[0, "NaN"], [1, "Infinity"], [2, "-Infinity"], [3, 0.5]]},
        '{"metric": "escaped", "series": [[0, "\\u004eaN"]]}',
        {"metric": "NaN", "series": [[0, 1.0]]},
    )
    record = read_record(path)
    steps = [p[0] for p in record["m"]]
    values = [p[1] for p in record["m"]]
    assert steps == [0, 1, 2, 3]
    assert math.isnan(values[0]) and values[1] == math.inf and values[2] == -math.inf and values[3] == 0.5
    assert math.isnan(record["escaped"][0][1])
    # a metric named like a marker is still a name, not a float
    assert record["NaN"] == [(0, 1.0)]


def test_marker_in_step_position_is_not_decoded_and_makes_the_point_step_less(tmp_path):
    path = _write(tmp_path / "record.jsonl", {"metric": "m", "series": [["NaN", 1.0]]})
    record = read_record(path)
    assert record["m"] == [(None, 1.0)]
    assert record.invalid_steps == {"m": [("NaN", 1.0, str(path), 1)]}


@pytest.mark.parametrize("step", [-1, 1.0, True, "3", [1], {"s": 1}])
def test_a_step_that_is_not_an_int_makes_the_point_step_less_and_is_noted(tmp_path, step):
    path = _write(tmp_path / "record.jsonl", {"metric": "ok", "series": [[0, 1.0]]},
                  {"metric": "m", "series": [[0, 0.5], [step, 0.7], [None, 0.9]]})
    record = read_record(path)
    assert record["m"] == [(0, 0.5), (None, 0.7), (None, 0.9)]
    assert record["ok"] == [(0, 1.0)]
    assert record.invalid_steps == {"m": [(step, 0.7, str(path), 2)]}


def test_non_numeric_values_are_kept_for_selection_to_drop(tmp_path):
    path = _write(
        tmp_path / "record.jsonl",
        {"metric": "m", "series": [[0, True], [1, None], [2, "text"], [3, {"x": 1}], [4, [1]], [None, 0.5]]},
    )
    assert read_record(path)["m"] == [(0, True), (1, None), (2, "text"), (3, {"x": 1}), (4, [1]), (None, 0.5)]


def test_items_past_the_second_are_ignored(tmp_path):
    path = _write(tmp_path / "record.jsonl", {"metric": "m", "series": [[0, 0.1, "2026-01-01"], [1, 0.2]]})
    assert read_record(path)["m"] == [(0, 0.1), (1, 0.2)]


def test_blank_lines_are_skipped_but_counted(tmp_path):
    path = _write(tmp_path / "record.jsonl", {"metric": "m", "series": [[0, 1]]}, "", "   ", "{oops")
    err = _error(path)
    assert err.line == 4


def test_same_metric_on_several_lines_of_one_file_is_merged_by_step(tmp_path):
    path = _write(
        tmp_path / "record.jsonl",
        {"metric": "m", "series": [[2, 0.2], [None, "first"], [0, 0.0]]},
        {"metric": "other", "series": [[1, 1.0], [0, 0.0]]},
        {"metric": "m", "series": [[1, 0.1], [2, 0.25], [None, "second"]]},
    )
    record = read_record(path)
    # the later line's step 2 replaces the earlier; stepped points by step, step-less in line order
    assert record["m"] == [(0, 0.0), (1, 0.1), (2, 0.25), (None, "first"), (None, "second")]
    assert record["other"] == [(1, 1.0), (0, 0.0)]  # one line: kept as written
    assert list(record.metrics) == ["m", "other"]


def test_merge_keeps_the_duplicates_of_one_line():
    assert merge_lines([[(0, 1), (1, 2)], [(1, 3), (1, 4)]]) == [(0, 1), (1, 3), (1, 4)]


# -- directory ---------------------------------------------------------------------------------


def test_directory_merges_in_sorted_name_order_and_sorts_by_step_with_null_last(tmp_path):
    d = tmp_path / "record"
    d.mkdir()
    _write(d / "rank1.jsonl", {"metric": "m", "series": [[2, "r1-2"], [None, "r1-null"], [0, "r1-0"]]},
           {"metric": "only_rank1", "series": [[0, 1.0]]})
    _write(d / "rank0.jsonl", {"metric": "m", "series": [[None, "r0-null"], [2, "r0-2"], [1, "r0-1"]]},
           {"metric": "n", "series": [[1, 1.0], [0, 0.0]]})
    record = read_record(d)
    assert record.sources == [str(d / "rank0.jsonl"), str(d / "rank1.jsonl")]
    # concatenated rank0 then rank1, then stably sorted: equal steps keep file order, null last
    assert [v for _, v in record["m"]] == ["r1-0", "r0-1", "r0-2", "r1-2", "r0-null", "r1-null"]
    assert record["n"] == [(0, 0.0), (1, 1.0)]
    # first-seen order over the files in read order
    assert list(record.metrics) == ["m", "n", "only_rank1"]


def test_directory_skips_tmp_hidden_and_underscore_files(tmp_path):
    d = tmp_path / "record"
    d.mkdir()
    _write(d / "data.jsonl", {"metric": "m", "series": [[0, 1.0]]})
    for name in ("partial.jsonl.tmp", "_SUCCESS", ".checkpoint.jsonl", "_metadata.jsonl"):
        (d / name).write_text("this is not JSON\n")
    (d / "nested").mkdir()
    record = read_record(d)
    assert record.sources == [str(d / "data.jsonl")]
    assert record["m"] == [(0, 1.0)]


def test_empty_directory_or_only_skipped_files_is_an_error(tmp_path):
    d = tmp_path / "record"
    d.mkdir()
    assert "holds no record file" in str(_error(d))
    (d / "_SUCCESS").write_text("")
    (d / "x.tmp").write_text("{}")
    err = _error(d)
    assert err.path == str(d) and "holds no record file" in str(err)


# -- location errors ---------------------------------------------------------------------------


@pytest.mark.parametrize("location", [None, "", "   "])
def test_empty_location_is_an_error(location):
    assert "no record location given" in str(_error(location))


def test_missing_location_names_it(tmp_path):
    err = _error(tmp_path / "nowhere.jsonl")
    assert str(err) == f"{tmp_path / 'nowhere.jsonl'}: no such file or directory"


@pytest.mark.parametrize("content", ["", "\n\n"])
def test_file_with_no_metric_line_is_an_empty_record(tmp_path, content):
    path = tmp_path / "record.jsonl"
    path.write_text(content)
    record = read_record(path)
    assert len(record) == 0 and record.sources == [str(path)]


class _UnreadablePath:
    """A pathlib-like object whose file cannot be opened (permissions cannot be tested as root)."""

    name = "locked.jsonl"

    def __str__(self) -> str:
        return "store://bucket/locked.jsonl"

    def exists(self) -> bool:
        return True

    def is_dir(self) -> bool:
        return False

    def iterdir(self):
        raise NotADirectoryError(str(self))

    def open(self, mode: str = "r"):
        raise PermissionError(13, "Permission denied")


def test_unreadable_file_names_the_file():
    err = _error(_UnreadablePath())
    assert str(err) == "store://bucket/locked.jsonl: cannot read: Permission denied"


def test_unknown_format_is_an_error(tmp_path):
    path = _write(tmp_path / "record.jsonl", {"metric": "m", "series": []})
    assert "unknown record format 'parquet'" in str(_error(path, format="parquet"))


# -- line errors -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("line", "where"),
    [
        ('{"metric": "m" "series": []}', "Expecting ',' delimiter (column 16)"),
        ('{"metric": "m", "series": [[0, 1.0]', "Expecting ',' delimiter (column 36, the end of the line)"),
        ('{"metric": "m", "series": [[0, 1.0]]} x', "Extra data (column 39)"),
        ("garbage", "Expecting value (column 1)"),
    ],
)
def test_a_broken_json_line_is_reported_at_its_real_column(tmp_path, line, where):
    path = _write(tmp_path / "record.jsonl", {"metric": "ok", "series": [[0, 1.0]]}, line)
    assert str(_error(path)) == f"{path}:2: not valid JSON: {where}"


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ("{not json", "not valid JSON"),
        ('[1, 2]', 'expected a JSON object with "metric" and "series"'),
        ('"text"', 'expected a JSON object with "metric" and "series"'),
        ('{"series": [[0, 1]]}', "field 'metric': missing"),
        ('{"metric": "m"}', "field 'series': missing"),
        ('{"metric": [3], "series": []}', "field 'metric': must be a string, got array [3]"),
        ('{"metric": {"a": 1}, "series": []}', "field 'metric': must be a string, got object"),
        ('{"metric": "m", "series": {"0": 1}}', "field 'series': must be an array of [step, value] points"),
        ('{"metric": "m", "series": null}',
         "field 'series': must be an array of [step, value] points, got null"),
        ('{"metric": "m", "series": [[0, 1], 0.5]}',
         "point 1 must be an array [step, value] of at least 2 items"),
        ('{"metric": "m", "series": [[0]]}', "point 0 must be an array [step, value] of at least 2 items"),
        ('{"metric": "m", "series": [[0, 1], "ab"]}', "point 1 must be an array [step, value]"),
    ],
)
def test_every_line_error_names_file_and_line(tmp_path, line, message):
    path = _write(tmp_path / "record.jsonl", {"metric": "ok", "series": [[0, 1.0]]}, line)
    err = _error(path)
    assert err.path == str(path) and err.line == 2
    assert str(err).startswith(f"{path}:2: ")
    assert message in err.message


def test_error_in_second_file_of_directory_names_that_file(tmp_path):
    d = tmp_path / "record"
    d.mkdir()
    _write(d / "a.jsonl", {"metric": "m", "series": [[0, 1.0]]})
    _write(d / "b.jsonl", {"metric": "m", "series": [[1, 1.0]]}, {"metric": "m", "series": [[1]]})
    err = _error(d)
    assert (err.path, err.line) == (str(d / "b.jsonl"), 2)


def test_record_error_formats_and_pickles():
    assert str(RecordError("bad", path="r.jsonl", line=3)) == "r.jsonl:3: bad"
    assert str(RecordError("bad", path="r.jsonl")) == "r.jsonl: bad"
    assert str(RecordError("bad")) == "bad"
    copy = pickle.loads(pickle.dumps(RecordError("bad", path="r.jsonl", line=3)))
    assert (copy.message, copy.path, copy.line, str(copy)) == ("bad", "r.jsonl", 3, "r.jsonl:3: bad")


@pytest.mark.parametrize(
    "line",
    [
        {"metric": "m", "series": []},
        {"metric": "m", "series": [[0, 1.0], [None, "NaN"], [2, "x"], [3, True, "extra"]]},
        {"metric": "m", "series": [[None, None]]},
        {"metric": "m", "series": [[0, "-Infinity"]], "unit": "s"},
    ],
)
def test_fast_path_agrees_with_the_schema(line):
    """The tight check used on the hot path gives what the marshmallow schema gives."""
    fast = load_series_line(json.loads(json.dumps(line)))
    loaded = RecordLineSchema().load(json.loads(json.dumps(line)))
    slow = (loaded["metric"], *loaded["series"])
    assert repr(fast) == repr(slow)


# -- rows format -------------------------------------------------------------------------------


def test_rows_format_converts_to_series(tmp_path):
    path = _write(
        tmp_path / "history.jsonl",
        {"step": 0, "train/grad_norm": 0.5, "rollout/raw_reward": 0.8},
        {"step": 1, "rollout/raw_reward": "NaN", "train/grad_norm": 0.4, "note": "warmup"},
        {"step": None, "summary/rate": 0.01},
    )
    record = read_record(path, format="rows")
    assert list(record.metrics) == ["train/grad_norm", "rollout/raw_reward", "note", "summary/rate"]
    assert record["train/grad_norm"] == [(0, 0.5), (1, 0.4)]
    assert record["rollout/raw_reward"][0] == (0, 0.8)
    assert record["rollout/raw_reward"][1][0] == 1 and math.isnan(record["rollout/raw_reward"][1][1])
    assert record["summary/rate"] == [(None, 0.01)]
    assert record["note"] == [(1, "warmup")]


def test_rows_directory_is_merged_and_sorted_by_step(tmp_path):
    d = tmp_path / "history"
    d.mkdir()
    _write(d / "b.jsonl", {"step": 0, "m": 0.0})
    _write(d / "a.jsonl", {"step": 2, "m": 2.0}, {"step": 1, "m": 1.0})
    assert read_record(d, format="rows")["m"] == [(0, 0.0), (1, 1.0), (2, 2.0)]


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ('{"m": 1.0}', "field 'step': missing"),
        ('{"step": -2, "m": 1.0}', "field 'step': must be an integer >= 0 or null, got -2"),
        ('{"step": true, "m": 1.0}', "field 'step': must be an integer >= 0 or null, got True"),
        ('[0, 1]', 'expected a JSON object with "step"'),
        ("nope", "not valid JSON"),
    ],
)
def test_rows_errors_name_file_and_line(tmp_path, line, message):
    path = _write(tmp_path / "history.jsonl", {"step": 0, "m": 1.0}, line)
    err = _error(path, format="rows")
    assert (err.path, err.line) == (str(path), 2)
    assert message in err.message


# -- limits, special files and skipped entries ---------------------------------------------------


def test_step_above_64_bits_names_file_and_line(tmp_path):
    path = _write(tmp_path / "record.jsonl", {"metric": "m", "series": [[2**63 - 1, 1.0]]},
                  {"metric": "m", "series": [[2**63, 1.0]]})
    err = _error(path)
    assert (err.path, err.line) == (str(path), 2) and "2**63 - 1" in str(err)
    rows = _write(tmp_path / "rows.jsonl", {"step": 2**63, "m": 1.0})
    assert _error(rows, format="rows").line == 1


def test_line_nested_too_deeply_names_file_and_line(tmp_path):
    path = _write(tmp_path / "record.jsonl", {"metric": "m", "series": [[0, 1.0]]}, "[" * 50_000 + "]" * 50_000)
    err = _error(path)
    assert (err.path, err.line) == (str(path), 2) and "nested too deeply" in str(err)


def test_skipped_directory_entries_are_listed_with_their_reason(tmp_path):
    _write(tmp_path / "rank0.jsonl", {"metric": "m", "series": [[0, 1.0]]})
    (tmp_path / "_SUCCESS").touch()
    (tmp_path / ".hidden").touch()
    (tmp_path / "rank1.jsonl.tmp").touch()
    (tmp_path / "sub").mkdir()
    record = read_record(tmp_path)
    reasons = dict(record.skipped)
    assert set(reasons) == {str(tmp_path / n) for n in ("_SUCCESS", ".hidden", "rank1.jsonl.tmp", "sub")}
    assert "'_'" in reasons[str(tmp_path / "_SUCCESS")] and "directory" in reasons[str(tmp_path / "sub")]
    assert read_record(tmp_path / "rank0.jsonl").skipped == []


@pytest.mark.parametrize("kind", ["fifo", "socket", "dangling", "loop"])
def test_unreadable_entries_are_errors_naming_the_path(tmp_path, kind):
    import os
    import socket

    _write(tmp_path / "rank0.jsonl", {"metric": "m", "series": [[0, 1.0]]})
    bad = tmp_path / "rank1.jsonl"
    if kind == "fifo":
        os.mkfifo(bad)
    elif kind == "socket":
        sock = socket.socket(socket.AF_UNIX)
        sock.bind(str(bad))
        sock.close()
    elif kind == "dangling":
        bad.symlink_to(tmp_path / "gone")
    else:
        bad.symlink_to(bad)
    err = _error(tmp_path)
    assert err.path == str(bad)
    if kind in ("fifo", "socket"):
        assert _error(bad).path == str(bad)  # as the record itself, too


# -- what the reference gate reads leniently: read the same way, with a warning -----------------


def test_a_line_whose_metric_is_not_a_string_is_skipped_with_a_warning_naming_file_and_line(tmp_path):
    path = _write(tmp_path / "record.jsonl", {"metric": "ok", "series": [[0, 1.0]]},
                  '{"metric": 3, "series": [[0, 2]]}', '{"metric": null, "series": []}')
    record = read_record(path)
    assert record.metrics == {"ok": [(0, 1.0)]}
    assert record.warnings == [
        f'{path}:2: "metric" is number 3, not a string: no gate can name this metric, so the line is not gated '
        "(the reference gate reads it the same way)",
        f'{path}:3: "metric" is null None, not a string: no gate can name this metric, so the line is not gated '
        "(the reference gate reads it the same way)",
    ]


def test_a_metric_named_empty_is_read_with_a_warning(tmp_path):
    path = _write(tmp_path / "record.jsonl", '{"metric": "", "series": [[0, 2]]}')
    record = read_record(path)
    assert record[""] == [(0, 2.0)]
    assert record.warnings == [f'{path}:1: the metric is named "" (empty): only a gate whose metric_key is "" gates it']


def test_points_whose_value_is_not_a_number_are_noted_with_file_and_line_unless_a_later_line_replaced_them(tmp_path):
    path = _write(
        tmp_path / "record.jsonl",
        {"metric": "m", "series": [[0, None], [1, "x"], [2, True]]},
        {"metric": "m", "series": [[1, 0.5]]},  # replaces step 1
    )
    record = read_record(path)
    assert record.dropped == {"m": [(0, None, str(path), 1), (2, True, str(path), 1)]}
    assert record.dropped_count == {"m": 2}
    assert record.last_line("m") == [(1, 0.5)]
