"""A run's values as integer-keyed points, and the blocks that keep their order (schema version 6).

A stored value is a ``metric_points`` row ``(run_key, coordinate, value, at_step)``; its place in
the run (its ordinal: declaration then step order, with one place for each declaration that had a
selection error) is kept by the run's blocks.  A block is a stretch of consecutive ordinals whose
coordinates are consecutive too and belong to one declaration: ``(coordinate, ordinal, length,
declaration)``.  Coordinates are numbered as they are first written, so a night written as the
nights before it is one block per declaration.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Iterable, Iterator, Sequence
from itertools import repeat

import numpy as np

__all__ = [
    "AT_STEP_SQL", "Block", "Ordinals", "PointGroup", "PointRows", "blocks_of", "read_at_step", "stored_at_step",
]

#: The header and trailer of PostgreSQL's binary ``COPY`` format: signature, flags, no extension.
COPY_BINARY_HEADER = b"PGCOPY\n\xff\r\n\x00" + bytes(8)
COPY_BINARY_TRAILER = b"\xff\xff"
#: One ``metric_points`` row in binary ``COPY``: field count, then each field's length and value
#: (``run_key`` and ``coordinate`` INTEGER, ``value`` DOUBLE PRECISION), ``at_step`` NULL (length -1)...
_ROW_NULL_AT = np.dtype([("fields", ">i2"), ("run_key_len", ">i4"), ("run_key", ">i4"), ("coordinate_len", ">i4"),
                         ("coordinate", ">i4"), ("value_len", ">i4"), ("value", ">f8"), ("at_step_len", ">i4")])
#: ... or a BIGINT.
_ROW_AT = np.dtype(_ROW_NULL_AT.descr + [("at_step", ">i8")])

#: ``metric_points.at_step`` when a value has no real step (a ``"last"`` point without one); real
#: steps are never negative.
NO_STEP = -1

#: The real step of a point in SQL, from the point (alias ``p``) and its coordinate (alias ``c``).
AT_STEP_SQL = "CASE WHEN {p}.at_step IS NULL THEN {c}.step WHEN {p}.at_step = -1 THEN NULL ELSE {p}.at_step END"


def stored_at_step(step: int, at_step: int | None) -> int | None:
    """Return what ``metric_points.at_step`` holds for a value: ``NULL`` when it is the stored step.

    Only ``steps: "last"`` values have a real step of their own (the stored step is ``-1``), so
    nearly every row stores nothing there, and PostgreSQL then keeps its heap row at 40 bytes.

    :param step: the stored step.
    :param at_step: the value's real step (``None``: it has none).
    """
    if at_step == step:
        return None
    return NO_STEP if at_step is None else at_step


def read_at_step(step: int, stored: int | None) -> int | None:
    """Return a value's real step from its stored step and ``metric_points.at_step``.

    :param step: the stored step.
    :param stored: what ``metric_points.at_step`` holds.
    """
    if stored is None:
        return step
    return None if stored == NO_STEP else stored

#: ``(first coordinate, first ordinal, length, declaration)``.
Block = tuple[int, int, int, int]


def blocks_of(placed: Iterable[tuple[int, int, int]]) -> list[Block]:
    """Return the blocks of a run's values.

    :param placed: ``(ordinal, coordinate, declaration)`` of every value, in ordinal order.
    """
    blocks: list[list[int]] = []
    last: list[int] | None = None
    for ordinal, coordinate, declaration in placed:
        if (last is not None and last[3] == declaration and ordinal == last[1] + last[2]
                and coordinate == last[0] + last[2]):
            last[2] += 1
            continue
        last = [coordinate, ordinal, 1, declaration]
        blocks.append(last)
    return [(c, o, n, d) for c, o, n, d in blocks]


class Ordinals:
    """The ordinal and declaration of each coordinate of one run, from the run's blocks.

    :param blocks: the run's blocks, in any order.
    """

    def __init__(self, blocks: Iterable[Sequence[int]]) -> None:
        self.blocks: list[Block] = sorted((int(c), int(o), int(n), int(d)) for c, o, n, d in blocks)
        self._starts = [b[0] for b in self.blocks]

    def _block(self, coordinate: int) -> Block:
        i = bisect_right(self._starts, coordinate) - 1
        if i >= 0:
            block = self.blocks[i]
            if coordinate < block[0] + block[2]:
                return block
        raise KeyError(coordinate)

    def ordinal(self, coordinate: int) -> int:
        """Return the ordinal of one of the run's coordinates.

        :param coordinate: the coordinate.
        :raises KeyError: the run has no value at that coordinate.
        """
        block = self._block(coordinate)
        return block[1] + coordinate - block[0]

    def declaration(self, coordinate: int) -> int:
        """Return the declaration of one of the run's coordinates.

        :param coordinate: the coordinate.
        :raises KeyError: the run has no value at that coordinate.
        """
        return self._block(coordinate)[3]

    def declarations(self) -> dict[int, tuple[int, int]]:
        """Return each declaration of the run with the lowest and highest coordinate it holds."""
        out: dict[int, tuple[int, int]] = {}
        for coordinate, _, length, declaration in self.blocks:
            lo, hi = out.get(declaration, (coordinate, coordinate + length - 1))
            out[declaration] = (min(lo, coordinate), max(hi, coordinate + length - 1))
        return out

    def __len__(self) -> int:
        return sum(b[2] for b in self.blocks)


class PointGroup:
    """Consecutive values of one declaration, as parallel lists: the columnar form a night is written in.

    A selection's lists are passed as they are (no object per value); the store numbers their
    coordinates and writes them.

    :param keys: the declaration's ``(metric_key, steps_key, constraint_key)``.
    :param ordinal: the ordinal of the first value (the others follow, one apart).
    :param steps: the stored steps.
    :param values: the values, parallel to ``steps``.
    :param at_steps: the real steps, parallel to ``steps`` (``steps`` itself when they are the same).
    """

    __slots__ = ("keys", "ordinal", "steps", "values", "at_steps")

    def __init__(self, keys: tuple[str, str, str], ordinal: int, steps: Sequence[int],
                 values: Sequence[float], at_steps: Sequence[int | None]) -> None:
        self.keys = keys
        self.ordinal = ordinal
        self.steps = steps
        self.values = values
        self.at_steps = at_steps

    def __len__(self) -> int:
        return len(self.steps)

    def part(self, start: int, stop: int) -> PointGroup:
        """Return the values from ``start`` to ``stop`` (positions in this group) as a group.

        :param start: the first position.
        :param stop: one past the last position.
        """
        steps = self.steps[start:stop]
        at_steps = steps if self.at_steps is self.steps else self.at_steps[start:stop]
        return PointGroup(self.keys, self.ordinal + start, steps, self.values[start:stop], at_steps)

    def stored_at_steps(self) -> list[int | None] | None:
        """Return what ``metric_points.at_step`` holds for each value, or ``None`` when every one is ``NULL``."""
        steps, at_steps = self.steps, self.at_steps
        if at_steps is steps or at_steps == steps:
            return None
        return [stored_at_step(s, a) for s, a in zip(steps, at_steps)]


class PointRows:
    """One chunk's ``metric_points`` rows of one run, as columns (iterating gives the row tuples).

    :param run_key: the run's key.
    :param coordinates: the rows' coordinates.
    :param values: the values (floats), parallel to ``coordinates``.
    :param at_steps: what ``metric_points.at_step`` holds, parallel; ``None`` when every one is ``NULL``.
    """

    __slots__ = ("run_key", "coordinates", "values", "at_steps")

    def __init__(self, run_key: int, coordinates: list[int], values: list[float],
                 at_steps: list[int | None] | None) -> None:
        self.run_key = run_key
        self.coordinates = coordinates
        self.values = values
        self.at_steps = at_steps

    def __len__(self) -> int:
        return len(self.coordinates)

    def __iter__(self) -> Iterator[tuple[int, int, float, int | None]]:
        at_steps: Iterable[int | None] = repeat(None) if self.at_steps is None else self.at_steps
        return zip(repeat(self.run_key), self.coordinates, self.values, at_steps)

    def copy_binary(self) -> bytes:
        """Return the rows in PostgreSQL's binary ``COPY`` format (``COPY ... FROM STDIN (FORMAT binary)``).

        Built as arrays, not row by row; the rows whose ``at_step`` is ``NULL`` come first, each part
        in the order of :attr:`coordinates`.
        """
        coordinates = np.asarray(self.coordinates, dtype=np.int64)
        values = np.asarray(self.values, dtype=np.float64)
        if self.at_steps is None:
            null_at = np.ones(len(coordinates), dtype=bool)
            at_steps = np.zeros(len(coordinates), dtype=np.int64)
        else:
            null_at = np.fromiter((a is None for a in self.at_steps), dtype=bool, count=len(self.at_steps))
            at_steps = np.fromiter((0 if a is None else a for a in self.at_steps), dtype=np.int64,
                                   count=len(self.at_steps))
        parts = [COPY_BINARY_HEADER]
        for dtype, chosen in ((_ROW_NULL_AT, null_at), (_ROW_AT, ~null_at)):
            n = int(chosen.sum())
            if not n:
                continue
            rows = np.empty(n, dtype=dtype)
            rows["fields"] = 4
            rows["run_key_len"] = 4
            rows["run_key"] = self.run_key
            rows["coordinate_len"] = 4
            rows["coordinate"] = coordinates[chosen]
            rows["value_len"] = 8
            rows["value"] = values[chosen]
            if dtype is _ROW_AT:
                rows["at_step_len"] = 8
                rows["at_step"] = at_steps[chosen]
            else:
                rows["at_step_len"] = -1
            parts.append(rows.tobytes())
        parts.append(COPY_BINARY_TRAILER)
        return b"".join(parts)

    def copy_text(self) -> str:
        """Return the rows in ``COPY ... FROM STDIN`` text format."""
        if self.at_steps is None:
            line = f"{int(self.run_key)}\t%d\t%r\t\\N\n".__mod__
            return "".join(map(line, zip(self.coordinates, self.values)))
        line = f"{int(self.run_key)}\t%d\t%r\t%s\n".__mod__
        at = ["\\N" if a is None else str(int(a)) for a in self.at_steps]
        return "".join(map(line, zip(self.coordinates, self.values, at)))
