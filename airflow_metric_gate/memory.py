"""Building a record's worth of small objects cheaply: the garbage collector kept out of the way."""

from __future__ import annotations

import gc
from collections.abc import Callable, Iterator
from contextlib import contextmanager

__all__ = ["gc_paused"]


@contextmanager
def gc_paused(*, lazily: bool = False) -> Iterator[Callable[[], None]]:
    """Pause the cyclic garbage collector while building many small, acyclic objects.

    Reading builds one small container per point, none of them cyclic; with the collector on,
    its passes over the growing heap cost about as much as parsing itself.  A plain line's points
    become ``records.Columns`` (two lists, no object per point) as soon as they are decoded, so a
    ``series`` record pauses the collector per plain line, and for the rest of the read only from
    its first line that keeps tuples: a pause over the whole read would end with one pass over
    every column.  The block receives a function that pauses the collector (a no-op once paused).

    :param lazily: pause only from the first call of that function, not from the start.
    """
    was_enabled = gc.isenabled()
    paused = False

    def pause() -> None:
        nonlocal paused
        if not paused:
            gc.disable()
            paused = True

    if not lazily:
        pause()
    try:
        yield pause
    finally:
        if paused and was_enabled:
            gc.enable()
