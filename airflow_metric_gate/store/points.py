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
from collections.abc import Iterable, Sequence

__all__ = ["AT_STEP_SQL", "Block", "Ordinals", "blocks_of", "read_at_step", "stored_at_step"]

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
