"""A night's rows in PostgreSQL's binary COPY format: read back field by field, they are the rows."""

from __future__ import annotations

import struct

import pytest

from airflow_metric_gate.store.points import COPY_BINARY_HEADER, COPY_BINARY_TRAILER, PointRows


def _read_binary(data: bytes) -> list[tuple]:
    """Decode binary COPY data of ``(INTEGER, INTEGER, DOUBLE PRECISION, BIGINT)`` rows, as the server would."""
    assert data.startswith(COPY_BINARY_HEADER) and data.endswith(COPY_BINARY_TRAILER)
    pos, end = len(COPY_BINARY_HEADER), len(data) - len(COPY_BINARY_TRAILER)
    formats = ("!i", "!i", "!d", "!q")
    rows = []
    while pos < end:
        (fields,) = struct.unpack_from("!h", data, pos)
        pos += 2
        assert fields == 4
        row = []
        for fmt in formats:
            (length,) = struct.unpack_from("!i", data, pos)
            pos += 4
            if length == -1:
                row.append(None)
                continue
            assert length == struct.calcsize(fmt)
            row.append(struct.unpack_from(fmt, data, pos)[0])
            pos += length
        rows.append(tuple(row))
    assert pos == end
    return rows


@pytest.mark.parametrize("at_steps", [None, [None, 5, -1, None, 2**62], [7, 8, 9, 10, 11]])
def test_binary_rows_are_the_rows(at_steps):
    rows = PointRows(2**31 - 1, [1, 2, 3, 40, 2**31 - 2], [0.1, -2.5e300, 1e-310, 0.0, 3.0], at_steps)
    assert sorted(_read_binary(rows.copy_binary())) == sorted(rows)


def test_the_rows_without_a_real_step_come_first_each_part_in_coordinate_order():
    rows = PointRows(3, [1, 2, 3, 4], [1.0, 2.0, 3.0, 4.0], [9, None, 8, None])
    assert [r[1] for r in _read_binary(rows.copy_binary())] == [2, 4, 1, 3]


def test_an_empty_chunk_is_the_header_and_the_trailer():
    assert PointRows(1, [], [], None).copy_binary() == COPY_BINARY_HEADER + COPY_BINARY_TRAILER
