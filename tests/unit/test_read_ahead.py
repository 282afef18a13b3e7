"""``read_ahead``: the reads in order, one item ahead on one reading thread, errors at their item."""

from __future__ import annotations

import signal
import threading
from contextlib import closing

import pytest

from airflow_metric_gate.chunking import read_ahead


def _readers() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name.startswith("metric-gate-read")]


@pytest.mark.parametrize("ahead", [False, True])
def test_reads_come_in_order_and_at_most_one_ahead(ahead):
    read: list[int] = []
    threads: set[str] = set()

    def reading(item: int) -> int:
        read.append(item)
        threads.add(threading.current_thread().name)
        return item * 10

    out = []
    for value in read_ahead(reading, range(5), ahead=ahead):
        out.append(value)
        assert len(read) - len(out) <= (1 if ahead else 0)  # never more than one read beyond the yielded
    assert out == [0, 10, 20, 30, 40] and read == list(range(5))
    assert len(threads) == 1 and next(iter(threads)).startswith("metric-gate-read") is ahead
    assert list(read_ahead(reading, [], ahead=ahead)) == [] and not _readers()


@pytest.mark.parametrize("ahead", [False, True])
def test_a_read_error_is_raised_at_its_item(ahead):
    def reading(item: int) -> int:
        if item == 2:
            raise LookupError("item 2 is gone")
        return item

    got = []
    with pytest.raises(LookupError, match="item 2 is gone"):
        for value in read_ahead(reading, range(5), ahead=ahead):
            got.append(value)
    assert got == [0, 1] and not _readers()


def _held_second_read():
    """A read whose second item waits for ``release``: ``(read, started, release, finished)``."""
    started, release = threading.Event(), threading.Event()
    finished: list[int] = []

    def reading(item: int) -> int:
        if item == 1:
            started.set()
            release.wait(5)
        finished.append(item)
        return item

    return reading, started, release, finished


def test_closing_waits_for_the_read_in_flight():
    reading, started, release, finished = _held_second_read()
    with closing(read_ahead(reading, range(3), ahead=True)) as values:
        assert next(values) == 0
        assert started.wait(5)  # the second item is being read
        threading.Timer(0.2, release.set).start()
    assert finished == [0, 1] and not _readers()  # closed only after the read in flight ended


@pytest.mark.skipif(threading.current_thread() is not threading.main_thread() or not hasattr(signal, "setitimer"),
                    reason="a timer signal reaches the main thread only")
def test_an_interruption_while_closing_still_waits_for_the_read_then_is_raised():
    """A task's timeout alarm arriving while a failure unwinds: the read in flight ends before anything goes on."""
    reading, started, release, finished = _held_second_read()

    def alarm(signum, frame):
        threading.Timer(0.3, release.set).start()  # the read ends a little after the alarm
        raise TimeoutError("the task timed out")

    previous = signal.signal(signal.SIGALRM, alarm)
    try:
        with pytest.raises(TimeoutError, match="the task timed out"):
            with closing(read_ahead(reading, range(3), ahead=True)) as values:
                assert next(values) == 0
                assert started.wait(5)
                signal.setitimer(signal.ITIMER_REAL, 0.2)  # fires while closing waits for the read
                raise RuntimeError("judging failed")
        assert finished == [0, 1] and not _readers()
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
