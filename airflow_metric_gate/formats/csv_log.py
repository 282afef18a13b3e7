"""Reading CSV metric logs: a header, a ``step`` column, one column per metric.

This is the layout of PyTorch Lightning's ``CSVLogger`` (``metrics.csv``) and of many homegrown
training loops::

    epoch,step,train/loss,val/loss
    0,49,0.91,
    0,49,,0.95
    1,99,0.62,

A cell left empty means the metric was not logged on that row.  Every other column than ``step``
is a metric (``epoch`` too, as Lightning logs it).  A cell reads as an int when it is written as
one (``3``), else as a float when Python's ``float`` reads it (``0.5``, ``1e-3``, ``nan``, ``inf``),
else it is kept as text, for step selection to drop (SPEC 2).  A step cell must be an int >= 0;
an empty step cell, or one written otherwise (``3.0``, ``-1``), makes the row's points step-less.
"""

from __future__ import annotations

import codecs
import csv
import re
from collections.abc import Iterator
from typing import Any

from airflow_metric_gate.errors import BadInputError
from airflow_metric_gate.formats import FilePoints

#: The column that holds the step.
STEP_COLUMN = "step"
_INT = re.compile(r"[+-]?[0-9]+")
#: The largest step the store holds (a signed 64-bit integer); a larger step is not a valid step.
_MAX_STEP = 2**63 - 1


class CsvLogError(BadInputError):
    """A CSV log cannot be read.

    :param message: what is wrong.
    :param line: the 1-based line, if any.
    """

    def __init__(self, message: str, line: int | None = None) -> None:
        self.line = line
        super().__init__(message)


def _cell_value(cell: str) -> Any:
    text = cell.strip()
    if _INT.fullmatch(text):
        return int(text)
    if "_" in text:  # Python's float() reads "1_0" as 10.0; a CSV log means no such number
        return cell
    try:
        return float(text)
    except ValueError:
        return cell


def _lines(fh: Any) -> Iterator[str]:
    decoder = codecs.getincrementaldecoder("utf-8-sig")()
    for raw in fh:
        yield decoder.decode(raw)
    tail = decoder.decode(b"", final=True)
    if tail:
        yield tail


def read_csv_log(fh: Any) -> dict[str, FilePoints]:
    """Read every logged cell of a CSV log, in row order.

    :param fh: the file, opened for reading bytes (UTF-8, with or without a byte-order mark).
    :return: metric -> ``(steps, values, invalid)`` (see :data:`~airflow_metric_gate.formats.FilePoints`),
        in column order; positions are 1-based lines.
    :raises CsvLogError: no header, no ``step`` column, a repeated column name, a row longer than
        the header, or text that is not UTF-8.
    """
    reader = csv.reader(_lines(fh))
    try:
        header = next(reader, None)
        if header is None or not any(name.strip() for name in header):
            return {}
        names = [name.strip() for name in header]
        if STEP_COLUMN not in names:
            raise CsvLogError(
                f"no {STEP_COLUMN!r} column: a csv record needs a header naming a {STEP_COLUMN!r} column and one "
                f"column per metric (found: {', '.join(map(repr, names))})",
                line=1,
            )
        seen: set[str] = set()
        for name in names:
            if name in seen:
                raise CsvLogError(f"the column {name!r} appears twice in the header", line=1)
            if not name:
                raise CsvLogError("a column of the header has no name", line=1)
            seen.add(name)
        step_at = names.index(STEP_COLUMN)
        columns = [(i, name) for i, name in enumerate(names) if i != step_at]
        out: dict[str, FilePoints] = {name: ([], [], [], []) for _, name in columns}
        width = len(names)
        for row in reader:
            if not row:
                continue
            line = reader.line_num
            if len(row) > width:
                raise CsvLogError(f"the row has {len(row)} cells, the header names {width} columns", line=line)
            if len(row) < width:
                row = row + [""] * (width - len(row))
            written = row[step_at].strip()
            step: int | None = int(written) if written.isdigit() and written.isascii() else None
            if step is not None and step > _MAX_STEP:
                step = None
            for i, name in columns:
                cell = row[i]
                if not cell.strip():
                    continue
                value = _cell_value(cell)
                points = out[name]
                points[0].append(step)
                points[1].append(value)
                if step is None and written:
                    points[2].append((written, value, line))
                if type(value) is str:  # kept for selection to drop: noted, so that the verdict reports it
                    points[3].append((step, value, line))
    except UnicodeDecodeError as err:
        raise CsvLogError(f"not UTF-8 text: {err.reason} at byte {err.start} of a line") from None
    except csv.Error as err:
        raise CsvLogError(f"not a readable CSV: {err}", line=reader.line_num) from None
    return {name: points for name, points in out.items() if points[1]}
