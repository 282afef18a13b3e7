"""The store's errors: which failures a retry may cure (:class:`StoreUnavailable`) and which it cannot.

Each is one of the package's two kinds (:mod:`airflow_metric_gate.errors`); :class:`StoreError` is
their family, never raised as it is.
"""

from __future__ import annotations

from airflow_metric_gate.errors import BadInputError, MetricGateError, UnavailableError

__all__ = ["RunRewritten", "StoreError", "StoreFailure", "StoreInputError", "StoreUnavailable"]


class StoreError(MetricGateError):
    """A store operation failed: the family of the store's errors (catch it for "any store error")."""


class StoreUnavailable(StoreError, UnavailableError):
    """The store could not be reached or was busy; retrying later may succeed."""


class StoreFailure(StoreError, UnavailableError):
    """The store answered with an error that is neither an outage nor a refusal of the input.

    A deadlock, a serialization failure, or a schema newer than this package's (fixed once the
    workers run the newer package); retrying later may succeed.
    """


class StoreInputError(StoreError, BadInputError, ValueError):
    """The data handed to the store is invalid; retrying will not help."""


class RunRewritten(StoreUnavailable):
    """A run's values were replaced by another writer of the same run id before its verdict was kept.

    The stored values, status and counts stay those of one writer (the other one); retrying judges
    the values stored then.

    :param run_id: the store run id.
    :param expected: the write version this writer judged.
    :param found: the write version the store holds now (``None``: the run is gone).
    """

    def __init__(self, run_id: str, expected: int, found: int | None) -> None:
        self.run_id = run_id
        self.expected = expected
        self.found = found
        now = "no longer exists" if found is None else f"is at write {found}"
        super().__init__(
            f"run {run_id} was written again by another writer of the same run id (this one judged write "
            f"{expected}, the store {now}); its verdict was not kept, and the stored values keep the other "
            "writer's verdict: retry to judge the values stored now"
        )
