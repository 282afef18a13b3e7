"""The store's errors: which failures a retry may cure (:class:`StoreUnavailable`) and which it cannot."""

from __future__ import annotations

__all__ = ["StoreError", "StoreInputError", "StoreUnavailable"]


class StoreError(Exception):
    """A store operation failed."""


class StoreUnavailable(StoreError):
    """The store could not be reached or was busy; retrying later may succeed."""


class StoreInputError(StoreError, ValueError):
    """The data handed to the store is invalid; retrying will not help."""
