"""Judging nights in date order: a night waits until no earlier night of its history window is pending."""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

from airflow_metric_gate.evaluation import DEFAULT_HISTORY_LIMIT
from airflow_metric_gate.store import MetricStore, StoreUnavailable
from airflow_metric_gate.store.rows import WindowRun

#: How many pending nights a message spells out (the rest are counted).
MESSAGE_NIGHTS = 10


def describe_runs(runs: Sequence[WindowRun]) -> str:
    """Name runs by logical date and store run id (and Airflow run id when known), oldest first.

    :param runs: e.g. :attr:`~airflow_metric_gate.store.rows.HistoryWindow.pending`.
    """
    names = []
    for r in runs[:MESSAGE_NIGHTS]:
        airflow = f", Airflow run {r.airflow_run_id}" if r.airflow_run_id else ""
        names.append(f"{r.logical_date.isoformat()} (store run {r.run_id}{airflow})")
    more = len(runs) - len(names)
    return ", ".join(names) + (f" and {more} more" if more > 0 else "")


class EarlierRunsPending(StoreUnavailable):
    """A run cannot be judged yet: earlier nights in its history window are still ``pending``.

    Retrying later succeeds once they are judged (or marked), hence a :class:`StoreUnavailable`.

    :param run_id: the store run id that waits.
    :param pending: the earlier runs it waits for, oldest first.
    :param waited: how many seconds it already waited, if it did.
    """

    def __init__(self, run_id: str, pending: Sequence[WindowRun], waited: float | None = None) -> None:
        self.run_id = run_id
        self.pending = list(pending)
        self.waited = waited
        after = f" after waiting {waited:g} s" if waited else ""
        super().__init__(
            f"run {run_id} is not judged{after}: {len(self.pending)} earlier night(s) of its history "
            f"window are still pending (stored, not judged yet): {describe_runs(self.pending)}"
        )


def wait_for_earlier_runs(
    store: MetricStore,
    run_id: str,
    *,
    history_limit: int = DEFAULT_HISTORY_LIMIT,
    timeout: float = 0.0,
    poll: float = 1.0,
    sleep: Any = time.sleep,
    clock: Any = time.monotonic,
) -> None:
    """Return once no earlier night in the run's history window is ``pending``.

    A night is judged against the history window of :meth:`MetricStore.history_window`; while a
    run in that window is still pending it might yet become trusted, so judging now would read too
    little history (a backfill runs many nights at once).

    :param store: the metric store.
    :param run_id: the store run id about to be judged.
    :param history_limit: the baseline's history limit (the window's size).
    :param timeout: how long to poll, in seconds; 0 checks once.
    :param poll: seconds between two checks.
    :param sleep: waits that many seconds (tests pass a fake).
    :param clock: returns the time in seconds (tests pass a fake).
    :raises EarlierRunsPending: earlier nights are still pending when the time is up.
    """
    deadline = clock() + timeout
    while True:
        pending = store.history_window(run_id, history_limit).pending
        if not pending:
            return
        remaining = deadline - clock()
        if remaining <= 0:
            raise EarlierRunsPending(run_id, pending, waited=timeout)
        sleep(min(poll, remaining))

