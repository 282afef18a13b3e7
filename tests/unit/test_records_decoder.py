"""Records are decoded with msgspec, and mean exactly what ``json.loads`` reads (SPEC 2).

msgspec decodes first; a line it refuses is decoded again by ``json.loads``.  These tests pin each
place where the two decoders differ, so the documented behaviour does not depend on which of them
read a line, and check the plain-line path (:class:`Columns`) against the general one.
"""

from __future__ import annotations

import gc
import json
import math
import operator
import sys

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from airflow_metric_gate.declarations import declare
from airflow_metric_gate.limits import MAX_STEP
from airflow_metric_gate.memory import gc_paused
from airflow_metric_gate.records import Columns, Record, RecordError, read_record
from airflow_metric_gate.schemas.records import (
    decode_plain_series_line,
    decode_series_line,
    load_series_line,
    may_hold_markers,
)
from airflow_metric_gate.selection import select_declaration

C = {"rel_up": 0.5, "rel_down": 0.5}
PROPERTY = settings(max_examples=150, deadline=None, derandomize=True, database=None)


def _read(tmp_path, *lines: str | bytes, **kwargs) -> Record:
    path = tmp_path / "record.jsonl"
    path.write_bytes(b"".join((line if isinstance(line, bytes) else line.encode()) + b"\n" for line in lines))
    return read_record(path, **kwargs)


def _error(tmp_path, *lines: str | bytes, **kwargs) -> RecordError:
    with pytest.raises(RecordError) as info:
        _read(tmp_path, *lines, **kwargs)
    return info.value


def _same(a: object, b: object) -> bool:
    """Equal, with the same types, NaN equal to NaN and -0.0 told from 0.0."""
    if type(a) is not type(b):
        return False
    if isinstance(a, float):
        return (math.isnan(a) and math.isnan(b)) or (a == b and math.copysign(1, a) == math.copysign(1, b))
    if isinstance(a, (list, tuple)):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    if isinstance(a, dict):
        return list(a) == list(b) and all(_same(a[k], b[k]) for k in a)
    return a == b


# -- where msgspec refuses what json.loads reads: the record keeps json.loads' meaning ---------------


@pytest.mark.parametrize(("literal", "expected"), [("NaN", math.nan), ("Infinity", math.inf), ("-Infinity", -math.inf)])
def test_non_finite_literals_read_as_json_loads_reads_them(tmp_path, literal, expected):
    record = _read(tmp_path, f'{{"metric": "m", "series": [[0, 1.0], [1, {literal}]]}}')
    (step, value) = record["m"][1]
    assert step == 1 and _same(value, expected)
    assert record.columns("m") is None  # not plain: the general path holds it


@pytest.mark.parametrize(
    ("text", "value"),
    [("1e400", math.inf), ("-1e400", -math.inf), ("1" + "0" * 400, 10**400), ("-" + "9" * 400, -int("9" * 400))],
)
def test_numbers_beyond_the_float_range_keep_their_json_loads_value_and_select_as_not_finite(tmp_path, text, value):
    record = _read(tmp_path, f'{{"metric": "m", "series": [[0, 1.0], [1, {text}]]}}')
    assert _same(record["m"][1][1], value)
    selection = select_declaration(record, declare("m", steps="all", constraint=C))
    assert selection.error == f"metric 'm': step 1 is not finite: {float('inf') if value > 0 else float('-inf')!r}"


@pytest.mark.skipif(not hasattr(sys, "get_int_max_str_digits"), reason="this Python converts integers of any length")
def test_an_integer_of_more_digits_than_python_converts_is_invalid_json_naming_the_line(tmp_path):
    huge = "1" + "0" * 5000
    err = _error(tmp_path, '{"metric": "m", "series": [[0, 1.0]]}', f'{{"metric": "m", "series": [[1, {huge}]]}}')
    assert err.line == 2 and "not valid JSON" in err.message and "4300" in err.message


@pytest.mark.parametrize("step", [2**63, 2**64, 10**30])
def test_a_step_beyond_64_bits_is_an_error_naming_the_line_never_a_float(tmp_path, step):
    err = _error(tmp_path, '{"metric": "m", "series": [[0, 1.0]]}', f'{{"metric": "m", "series": [[{step}, 1.0]]}}')
    assert err.line == 2 and "2**63 - 1" in err.message


def test_largest_step_is_plain(tmp_path):
    record = _read(tmp_path, f'{{"metric": "m", "series": [[{MAX_STEP}, 1.0]]}}')
    assert record.columns("m").steps == [MAX_STEP]


def test_a_lone_surrogate_is_read_as_json_loads_reads_it(tmp_path):
    record = _read(tmp_path, r'{"metric": "m\ud800", "series": [[0, 1.0]]}')
    assert list(record) == ["m\ud800"]


def test_invalid_utf8_is_invalid_json_naming_the_line(tmp_path):
    err = _error(tmp_path, '{"metric": "m", "series": [[0, 1.0]]}', b'{"metric": "m\xff", "series": [[0, 1.0]]}')
    assert err.line == 2 and err.message.startswith("not valid JSON")


def test_a_utf8_byte_order_mark_is_read_as_json_loads_reads_it(tmp_path):
    record = _read(tmp_path, b'\xef\xbb\xbf{"metric": "m", "series": [[0, 1.0]]}')
    assert record["m"] == [(0, 1.0)]


@pytest.mark.parametrize(
    "line",
    ['{"metric": "a", "metric": "m", "series": [[0, 1.0]]}',
     '{"metric": "m", "series": [[9, 9.0]], "series": [[0, 1.0]]}',
     '{"metric": "a", "metric": "m", "series": [[0, "x"]], "series": [[0, 1.0]]}'],
)
def test_a_duplicate_key_keeps_its_last_value_as_json_loads_does(tmp_path, line):
    assert _read(tmp_path, line).metrics == {"m": [(0, 1.0)]}


def test_integers_are_numbers_and_minus_zero_is_zero(tmp_path):
    record = _read(tmp_path, '{"metric": "m", "series": [[-0, 3], [1, -0], [2, -0.0]]}')
    assert record["m"] == [(0, 3), (1, 0), (2, 0)]
    selection = select_declaration(record, declare("m", steps="all", constraint=C))
    assert _same(selection.values, [3.0, 0.0, -0.0]) and selection.steps == [0, 1, 2]


# -- plain lines as columns ----------------------------------------------------------------------


def test_plain_metric_is_read_as_columns_and_shows_as_points(tmp_path):
    record = _read(tmp_path, '{"metric": "m", "series": [[0, 1.5], [1, 2.5]]}', '{"metric": "n", "series": []}')
    columns = record.columns("m")
    assert (columns.steps, columns.values, columns.distinct) == ([0, 1], [1.5, 2.5], True)
    assert record["m"] == [(0, 1.5), (1, 2.5)] and record["n"] == [] and record.point_count() == 2
    assert record.metrics == {"m": [(0, 1.5), (1, 2.5)], "n": []}


def test_plain_metric_with_a_repeated_step_keeps_every_point_in_order(tmp_path):
    record = _read(tmp_path, '{"metric": "m", "series": [[1, 1.0], [0, 2.0], [1, 3.0]]}')
    assert record["m"] == [(1, 1.0), (0, 2.0), (1, 3.0)] and not record.columns("m").distinct
    selection = select_declaration(record, declare("m", steps="all", constraint=C))
    assert selection.error == "metric 'm': step 1 appears more than once under steps \"all\""


def test_plain_lines_of_one_metric_merge_by_step_as_columns(tmp_path):
    record = _read(tmp_path, '{"metric": "m", "series": [[0, 1.0], [1, 2.0], [2, 3.0]]}',
                   '{"metric": "m", "series": [[1, 20.0], [3, 40.0]]}')
    assert record["m"] == [(0, 1.0), (1, 20.0), (2, 3.0), (3, 40.0)]
    assert record.columns("m") is not None


def test_plain_and_general_lines_of_one_metric_merge_as_points(tmp_path):
    record = _read(tmp_path, '{"metric": "m", "series": [[0, 1.0], [1, 2.0]]}',
                   '{"metric": "m", "series": [[1, "NaN"], [null, 5.0]]}')
    assert record["m"][0] == (0, 1.0) and record["m"][1][0] == 1 and math.isnan(record["m"][1][1])
    assert record["m"][2] == (None, 5.0) and record.columns("m") is None


def test_directory_of_plain_files_concatenates_and_sorts_columns(tmp_path):
    d = tmp_path / "record"
    d.mkdir()
    (d / "a.jsonl").write_text('{"metric": "m", "series": [[2, 2.0], [3, 3.0]]}\n')
    (d / "b.jsonl").write_text('{"metric": "m", "series": [[0, 0.0], [1, 1.0]]}\n')
    (d / "c.jsonl").write_text('{"metric": "n", "series": [[5, 5.0]]}\n{"metric": "o", "series": [[1, 1.0]]}\n')
    (d / "d.jsonl").write_text('{"metric": "o", "series": [[0, "x"]]}\n')
    record = read_record(d)
    assert record["m"] == [(0, 0.0), (1, 1.0), (2, 2.0), (3, 3.0)] and record.columns("m") is not None
    assert record["n"] == [(5, 5.0)]
    assert record["o"] == [(0, "x"), (1, 1.0)] and record.columns("o") is None


@pytest.mark.parametrize(
    "line",
    ['{"metric": "m", "series": [[0, 1.0, "extra"]]}', '{"metric": "m", "series": [[null, 1.0]]}',
     '{"metric": "m", "series": [[0, "NaN"]]}', '{"metric": "m", "series": [[0, true]]}',
     '{"metric": "m", "series": [[0.0, 1.0]]}', '{"metric": "m", "series": [[-1, 1.0]]}',
     '{"metric": "", "series": [[0, 1.0]]}', '{"metric": "m", "series": [[0, 1e400]]}', "[]", "", "NaN"],
)
def test_lines_that_are_not_plain_are_left_to_the_general_path(line):
    assert decode_plain_series_line(line.encode()) is None


# -- the two decoders agree wherever msgspec decodes ----------------------------------------------

_json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=5) | st.sampled_from([10**30, -(10**30), 2**63, 2**64, 10**400, 1e308]),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=3), inner, max_size=3),
    max_leaves=10,
)
_number_texts = st.one_of(
    st.floats(allow_nan=False, allow_infinity=False).map(repr),
    st.from_regex(r"-?(0|[1-9][0-9]{0,25})(\.[0-9]{1,25})?([eE][-+]?[0-9]{1,3})?", fullmatch=True),
)
_point_items = st.one_of(_json_values, st.sampled_from(["NaN", "Infinity", "-Infinity", "\\u004eaN", None, True, 0, 7]))
_series_lines = st.lists(st.lists(_point_items, min_size=1, max_size=3), max_size=5).map(
    lambda series: json.dumps({"metric": "m", "series": series}).replace("\\\\u004eaN", "\\u004eaN").encode())
_pair_steps = st.one_of(st.integers(0, 7), st.sampled_from([None, MAX_STEP, MAX_STEP + 1, -1, 1.0]))
_pair_values = st.one_of(
    st.floats(allow_nan=False, allow_infinity=False), st.integers(-(2**70), 2**70), st.booleans(), st.none(),
    st.sampled_from(["NaN", "Infinity", "-Infinity", "x", "nan", "\\u0049nfinity"]),
)
_pair_lines = st.lists(st.tuples(_pair_steps, _pair_values).map(list), max_size=6).map(
    lambda series: json.dumps({"metric": "m", "series": series}).replace("\\\\u0049", "\\u0049").encode())
_raw_lines = st.one_of(
    _pair_lines,
    _series_lines,
    _json_values.map(lambda v: json.dumps(v).encode()),
    _json_values.map(lambda v: json.dumps(v, ensure_ascii=False).encode("utf-8", "surrogatepass")),
    _number_texts.map(lambda n: f'{{"metric": "m", "series": [[0, {n}], [{n}, 1]], "x": {n}}}'.encode()),
    st.binary(max_size=30),
    st.sampled_from([b"NaN", b"[Infinity]", b'"\\ud800"', b'{"a": 1, "a": 2}', b"\xef\xbb\xbf[1]", b"1 ", b" [1]\r\n"]),
)


@PROPERTY
@given(raw=_raw_lines)
def test_what_msgspec_decodes_is_what_json_loads_gives(raw):
    try:
        decoded = msgspec.json.decode(raw)
    except (msgspec.DecodeError, RecursionError):
        return  # json.loads decides these lines
    assert _same(decoded, json.loads(raw)), raw


@PROPERTY
@given(raw=_raw_lines)
def test_a_plain_line_is_what_the_general_path_reads(raw):
    plain = decode_plain_series_line(raw)
    if plain is None:
        return
    metric, points = plain
    general_metric, general_points, invalid = load_series_line(json.loads(raw))
    assert metric == general_metric and invalid == []
    assert [s for s, _ in points] == [s for s, _ in general_points]
    assert _same([v for _, v in points], [float(v) for _, v in general_points])
    assert all(math.isfinite(v) and type(v) is float for _, v in points)


@PROPERTY
@given(raw=_raw_lines)
def test_a_line_of_scalar_pairs_is_what_the_general_path_reads(raw):
    typed = decode_series_line(raw, may_hold_markers(raw))
    if typed is None:
        return
    metric, points = typed
    general_metric, general_points, invalid = load_series_line(json.loads(raw), may_hold_markers(raw))
    assert metric == general_metric and invalid == []

    def as_read(value):  # the typed decoder reads every number as a float
        return float(value) if type(value) is int else value

    assert _same(points, [(s, as_read(v)) for s, v in general_points])


_steps = st.one_of(st.integers(min_value=0, max_value=6), st.sampled_from([MAX_STEP, None, -1, 2.0]))
_values = st.one_of(st.floats(allow_nan=False, allow_infinity=False, width=32), st.integers(-3, 3),
                    st.sampled_from(["NaN", "Infinity", "x", None, True]))
_series = st.lists(st.tuples(_steps, _values).map(list), max_size=6)
_wanted = st.one_of(st.sampled_from(["all", "last"]),
                    st.lists(st.integers(0, 6), min_size=1, max_size=3, unique=True).map(tuple))


@PROPERTY
@given(lines=st.lists(_series, min_size=1, max_size=3), wanted=_wanted)
def test_selection_from_columns_is_selection_from_points(tmp_path_factory, lines, wanted):
    path = tmp_path_factory.mktemp("r") / "record.jsonl"
    path.write_text("".join(json.dumps({"metric": "m", "series": s}) + "\n" for s in lines))
    record = read_record(path)
    as_points = Record({"m": record["m"]}, invalid_steps=record.invalid_steps, last_lines=record.last_lines,
                       dropped=record.dropped, dropped_count=record.dropped_count)
    declaration = declare("m", steps=list(wanted) if isinstance(wanted, tuple) else wanted, constraint=C)
    assert select_declaration(record, declaration) == select_declaration(as_points, declaration)


_row_steps = st.one_of(st.integers(0, 6), st.none())
_rows = st.lists(st.fixed_dictionaries({"step": _row_steps}, optional={"m": _values, "n": _values}), max_size=6)


@PROPERTY
@given(files=st.lists(_rows, min_size=1, max_size=2), wanted=_wanted)
def test_rows_selection_from_columns_is_selection_from_points(tmp_path_factory, files, wanted):
    folder = tmp_path_factory.mktemp("r")
    for i, rows in enumerate(files):
        (folder / f"rank{i}.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows))
    try:
        record = read_record(folder, format="rows")
    except RecordError:
        return  # a step that is not an int >= 0 or null: the rows format refuses it
    declaration = declare("m", steps=list(wanted) if isinstance(wanted, tuple) else wanted, constraint=C)
    as_points = Record({m: record[m] for m in record})
    assert select_declaration(record, declaration) == select_declaration(as_points, declaration)


def test_plain_rows_metrics_are_columns_and_the_others_points(tmp_path):
    record = _read(tmp_path, '{"step": 0, "m": 1.5, "n": 1, "o": 0.5}', '{"step": 1, "m": 2.5, "n": 2.0, "o": "NaN"}',
                   '{"step": null, "p": 1.0}', format="rows")
    assert record.columns("m").steps == [0, 1] and record["m"] == [(0, 1.5), (1, 2.5)]
    assert record.columns("n") is None and record["n"] == [(0, 1), (1, 2.0)]
    assert record.columns("o") is None and math.isnan(record["o"][1][1])
    assert record.columns("p") is None and record["p"] == [(None, 1.0)]


def test_columns_from_points_tells_distinct_steps():
    assert Columns.from_points([(0, 1.0), (1, 2.0)]).distinct
    repeated = Columns.from_points([(1, 1.0), (1, 2.0)])
    assert (repeated.steps, repeated.values, repeated.distinct) == ([1, 1], [1.0, 2.0], False)


def test_columns_from_points_like_earlier_columns_with_the_same_steps_share_step_objects_not_lists():
    earlier = Columns.from_points([(300, 1.0), (301, 2.0)])
    same = Columns.from_points([(300, 5.0), (301, 6.0)], like=earlier)
    assert (same.steps, same.values, same.distinct) == ([300, 301], [5.0, 6.0], True)
    assert same.steps is not earlier.steps and all(map(operator.is_, same.steps, earlier.steps))
    repeated = Columns.from_points([(300, 1.0), (300, 2.0)])
    assert not Columns.from_points([(300, 3.0), (300, 4.0)], like=repeated).distinct
    other = Columns.from_points([(300, 3.0), (302, 4.0)], like=earlier)
    assert (other.steps, other.values, other.distinct) == ([300, 302], [3.0, 4.0], True)


def test_metrics_logged_at_the_same_steps_are_read_as_separate_columns(tmp_path):
    d = tmp_path / "record"
    d.mkdir()
    (d / "a.jsonl").write_text('{"metric": "m", "series": [[500, 1.0], [501, 2.0]]}\n'
                               '{"metric": "n", "series": [[500, 3.0], [501, 4.0]]}\n')
    (d / "b.jsonl").write_text('{"metric": "m", "series": [[502, 5.0]]}\n')
    record = read_record(d)
    m, n = record.columns("m"), record.columns("n")
    assert m.steps[0] is n.steps[0] and m.steps is not n.steps
    assert record["m"] == [(500, 1.0), (501, 2.0), (502, 5.0)] and record["n"] == [(500, 3.0), (501, 4.0)]


def test_gc_paused_lazily_pauses_from_the_first_call_and_restores():
    assert gc.isenabled()
    with gc_paused(lazily=True) as pause:
        assert gc.isenabled()
        pause()
        pause()
        assert not gc.isenabled()
    assert gc.isenabled()
    with gc_paused() as pause:
        assert not gc.isenabled()
    assert gc.isenabled()
