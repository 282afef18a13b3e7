"""Null nights for the calibrated policy's unit tests: a factor shared by every step of a night, and own noise.

``tests/`` is on ``sys.path`` (see ``_gate_data``): the unit tests import this module by name.
"""

from __future__ import annotations

import math
import random


def night_noise(rng: random.Random, count: int, steps: int, shared: float, *, heavy: bool = False) -> list[list[float]]:
    """Return ``count`` nights of ``steps`` values of unit variance, a share ``shared`` of it common to the night.

    :param rng: the random source.
    :param count: nights.
    :param steps: values a night.
    :param shared: the share of each value's variance that every step of its night has in common (0 to 1).
    :param heavy: each step's own noise is Student's t with 3 degrees of freedom (scaled to unit variance).
    """
    out = []
    for _ in range(count):
        common = rng.gauss(0.0, 1.0) * math.sqrt(shared)
        night = []
        for _ in range(steps):
            own = rng.gauss(0.0, 1.0)
            if heavy:
                own = own / math.sqrt(rng.gammavariate(1.5, 1 / 1.5)) / math.sqrt(3.0)
            night.append(common + own * math.sqrt(1.0 - shared))
        out.append(night)
    return out
