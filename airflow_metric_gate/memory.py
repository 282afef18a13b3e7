"""Building a record's worth of small objects cheaply: the garbage collector kept out of the way."""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager

__all__ = ["gc_paused"]


@contextmanager
def gc_paused() -> Iterator[None]:
    """Pause the cyclic garbage collector while building many small, acyclic objects.

    Reading a record and selecting from it build one small container per point, none of them
    cyclic; with the collector on, its passes over the growing heap cost about as much as parsing
    itself.  The collector is switched back on afterwards only if it was on before.
    """
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()
