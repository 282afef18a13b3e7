"""The store's errors: which failures a retry may cure (:class:`StoreUnavailable`) and which it cannot."""

from __future__ import annotations

__all__ = ["RunRewritten", "StoreError", "StoreInputError", "StoreUnavailable"]


class StoreError(Exception):
    """A store operation failed."""


class StoreUnavailable(StoreError):
    """The store could not be reached or was busy; retrying later may succeed."""


class StoreInputError(StoreError, ValueError):
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
