"""A night's values of one declaration by step, kept as one array in the order the store read them.

The calibrated policy looks a night's values up by step (:class:`~airflow_metric_gate.decision.history.Candidate`).
A night read as one block (every coordinate of the declaration, in coordinate order) keeps its
values as they came, one ``float64`` array, and the steps' positions once for every night of that
block (:class:`StepIndex`): no mapping is built per night, and the judge takes whole rows from the
array.  The values are the very floats read, so a lookup gives what a ``dict`` of them would.
"""

from __future__ import annotations

from collections.abc import ItemsView, Iterator, Mapping, Sequence, ValuesView

import numpy as np

__all__ = ["StepIndex", "StepValues"]


class StepIndex:
    """Steps in the order of a block of values, and each step's position in it.

    :param steps: the steps, each once, in the block's order.
    """

    __slots__ = ("steps", "position")

    def __init__(self, steps: Sequence[int]) -> None:
        self.steps = tuple(steps)
        self.position = {step: i for i, step in enumerate(self.steps)}

    def __len__(self) -> int:
        return len(self.steps)

    def positions(self, steps: Sequence[int]) -> np.ndarray:
        """Return each of ``steps``' position in the block, ``-1`` for a step it does not have.

        :param steps: the steps looked up, in any order.
        """
        where = self.position.get
        return np.fromiter((where(step, -1) for step in steps), dtype=np.intp, count=len(steps))


class StepValues(Mapping[int, float]):
    """A night's values by step: ``values[i]`` is the value of ``index.steps[i]``.

    :param index: the steps of the block (shared by the nights read together).
    :param values: one value per step, as read.
    :raises ValueError: the values are not one per step.
    """

    __slots__ = ("index", "values_array")

    def __init__(self, index: StepIndex, values: np.ndarray) -> None:
        if values.shape != (len(index),):
            raise ValueError(f"expected {len(index)} values, one per step; got an array of shape {values.shape}")
        self.index = index
        self.values_array = values

    def __getitem__(self, step: int) -> float:
        return self.values_array.item(self.index.position[step])

    def __contains__(self, step: object) -> bool:
        return step in self.index.position

    def __iter__(self) -> Iterator[int]:
        return iter(self.index.steps)

    def __len__(self) -> int:
        return len(self.index.steps)

    def items(self) -> ItemsView[int, float]:
        return _Items(self)

    def values(self) -> ValuesView[float]:
        return _Values(self)

    def taken(self, positions: np.ndarray) -> np.ndarray:
        """Return the values at ``positions`` (:meth:`StepIndex.positions`), NaN where it is ``-1``.

        :param positions: positions in the block, ``-1`` for none.
        """
        if not len(self.values_array):
            return np.full(len(positions), np.nan)
        out = self.values_array[np.maximum(positions, 0)]  # a new array
        out[positions < 0] = np.nan
        return out


class _Items(ItemsView[int, float]):
    """A night's ``(step, value)`` pairs, made from the array in one call (not a lookup per step)."""

    _mapping: StepValues

    def __iter__(self) -> Iterator[tuple[int, float]]:
        return zip(self._mapping.index.steps, self._mapping.values_array.tolist())


class _Values(ValuesView[float]):
    """A night's values in the order of its steps, made from the array in one call."""

    _mapping: StepValues

    def __iter__(self) -> Iterator[float]:
        return iter(self._mapping.values_array.tolist())
