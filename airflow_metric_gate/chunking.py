"""Bounded chunks: how many points persist and evaluate hold at a time.

A night is written and judged chunk by chunk, so the memory a run needs follows the chunk size,
not the night's size (the record read and the results a verdict keeps aside).  The chunk size
changes no result: a night judged in one chunk and in many gives the same verdict.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Generator, Iterable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor, wait
from itertools import islice
from typing import TypeVar

__all__ = ["CHUNK_POINTS_ENV", "DEFAULT_CHUNK_POINTS", "batched", "chunk_points", "read_ahead"]

#: Points per chunk when nothing else is set.
DEFAULT_CHUNK_POINTS = 100_000
#: The environment variable that sets the points per chunk (an integer >= 1).
CHUNK_POINTS_ENV = "METRIC_GATE_CHUNK_POINTS"

T = TypeVar("T")
R = TypeVar("R")


def chunk_points(given: int | None = None) -> int:
    """Return the points per chunk: ``given``, else ``METRIC_GATE_CHUNK_POINTS``, else the default.

    :param given: an explicit chunk size (an integer >= 1), if any.
    :raises ValueError: the chunk size is not an integer >= 1.
    """
    if given is None:
        text = os.environ.get(CHUNK_POINTS_ENV, "").strip()
        if not text:
            return DEFAULT_CHUNK_POINTS
        try:
            given = int(text)
        except ValueError:
            raise ValueError(f"{CHUNK_POINTS_ENV} must be an integer >= 1, got {text!r}") from None
    if type(given) is not int or given < 1:
        raise ValueError(f"the chunk size must be an integer >= 1, got {given!r}")
    return given


def batched(items: Iterable[T], size: int) -> Iterator[list[T]]:
    """Yield lists of at most ``size`` consecutive items.

    :param items: any iterable, read once.
    :param size: the largest list (>= 1).
    """
    it = iter(items)
    while True:
        chunk = list(islice(it, size))
        if not chunk:
            return
        yield chunk


def read_ahead(read: Callable[[T], R], items: Iterable[T], *, ahead: bool) -> Generator[R, None, None]:
    """Yield ``read(item)`` for each item in order; with ``ahead``, the next one is read while the caller works.

    With ``ahead`` the reads run one after another on one reading thread, one read beyond the one
    yielded: while the caller works on a chunk (with the interpreter lock free while the reading
    thread waits on the database), the next chunk is read.  At most two results are held at once.
    A read's error is raised at the item it belongs to.  Close the generator (``contextlib.closing``)
    before anything else uses what ``read`` uses: closing waits for a read in flight.

    :param read: reads one item; called from the reading thread with ``ahead`` (only one at a time).
    :param items: the items, read once.
    :param ahead: read on one reading thread, one item ahead (the store's connection allows it).
    """
    if not ahead:
        for item in items:
            yield read(item)
        return
    it = iter(items)
    first = next(it, _NOTHING)
    if first is _NOTHING:
        return
    reader = ThreadPoolExecutor(max_workers=1, thread_name_prefix="metric-gate-read")
    pending: Future | None = None
    try:
        pending = reader.submit(read, first)  # type: ignore[arg-type]  # an item, not the marker
        for item in it:
            done = pending.result()
            pending = reader.submit(read, item)
            yield done
            del done
        yield pending.result()
    finally:
        _shut_down(reader, pending)


def _shut_down(reader: ThreadPoolExecutor, pending: Future | None) -> None:
    """Wait for the read in flight to end, even through an interruption (then raised once it has ended).

    A second exception while the first unwinds (a task's timeout alarm, another Ctrl-C) must not
    leave the reading thread using what the caller is about to close.  The read's own future is
    waited for (a thread's ``join`` can return early once interrupted), then the idle thread.
    """
    interrupted: BaseException | None = None
    for finish in (lambda: pending is None or wait([pending]), lambda: reader.shutdown(wait=True)):
        while True:
            try:
                finish()
                break
            except BaseException as error:  # noqa: BLE001  # not yet ended: wait again, raise it after
                interrupted = interrupted or error
    if interrupted is not None:
        raise interrupted


_NOTHING = object()
