"""The package's errors: one root, two kinds, and what each kind means to the CLI and to Airflow.

Every error the package raises is a :class:`MetricGateError` and exactly one of its two kinds:

- :class:`BadInputError`: the user's record, gates file, option or argument is wrong; retrying cannot
  help.  The CLI exits 2, an operator fails at once (``AirflowFailException``).
- :class:`UnavailableError`: the store, or the storage holding the record, cannot serve now; a retry
  may succeed.  The CLI exits 3, an operator raises a retryable ``AirflowException``.

:func:`error_fate` is the one place that decides, from the kind, what happens to an error; the CLI and
the operators both ask it.  Families such as ``StoreError`` sit between the root and the kinds and are
never raised as they are.

See also: :mod:`airflow_metric_gate.store.errors`, :mod:`airflow_metric_gate.operators.base`,
:func:`airflow_metric_gate.cli.main`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from airflow_metric_gate.enums import ErrorKind

__all__ = [
    "FATES",
    "BadInputError",
    "ErrorKind",
    "Fate",
    "LocatedError",
    "MetricGateError",
    "UnavailableError",
    "error_fate",
    "error_kind",
]


class MetricGateError(Exception):
    """The root of every error the package raises."""


class BadInputError(MetricGateError):
    """The input is wrong (a record, a declaration, an option); retrying will not help."""


class UnavailableError(MetricGateError):
    """The store, or the storage holding a record, cannot be used now; retrying later may succeed."""


@dataclass(frozen=True)
class Fate:
    """What becomes of an error of one kind.

    :param kind: the kind.
    :param exit_status: the ``metric-gate`` exit status.
    :param retry: whether an operator's task retries (``AirflowException``) rather than fails at once
        (``AirflowFailException``).
    """

    kind: ErrorKind
    exit_status: int
    retry: bool


#: The fate of each kind: the one table the CLI and the operators read.
FATES: dict[ErrorKind, Fate] = {
    ErrorKind.BAD_INPUT: Fate(ErrorKind.BAD_INPUT, exit_status=2, retry=False),
    ErrorKind.UNAVAILABLE: Fate(ErrorKind.UNAVAILABLE, exit_status=3, retry=True),
}


def error_kind(err: BaseException) -> ErrorKind | None:
    """Return the kind of an error, or ``None`` for an error that is not the package's (a bug).

    Any error of the package's that is not bad input is unavailable: an :class:`UnavailableError`, and a
    family's root raised as it is (``StoreError`` from code outside the package), as a store error always was.

    :param err: the error.
    """
    if isinstance(err, BadInputError):
        return ErrorKind.BAD_INPUT
    if isinstance(err, MetricGateError):
        return ErrorKind.UNAVAILABLE
    return None


def error_fate(err: BaseException) -> Fate | None:
    """Return what becomes of an error (exit status, retry or not), or ``None`` for one that is not the package's.

    :param err: the error.
    """
    kind = error_kind(err)
    return None if kind is None else FATES[kind]


class LocatedError(BadInputError, ValueError):
    """Bad input, with the file, line and field it was found at; ``str()`` reads ``path:line: message``.

    Instances pickle with all their attributes (they cross process boundaries in Airflow workers).

    :param message: what is wrong.
    :param path: the file (or location) concerned, if any.
    :param line: the 1-based line number, if any.
    :param field: the declaration field or argument concerned, if any.
    """

    def __init__(
        self, message: str, *, path: str | None = None, line: int | None = None, field: str | None = None
    ) -> None:
        self.message = message
        self.path = path
        self.line = line
        self.field = field
        super().__init__(str(self))

    def __str__(self) -> str:
        if self.path is None:
            return self.message
        if self.line is None:
            return f"{self.path}: {self.message}"
        return f"{self.path}:{self.line}: {self.message}"

    def __reduce__(self) -> tuple[Any, ...]:
        return _rebuild, (type(self), self.message, self.path, self.line, self.field)


def _rebuild(cls: type[LocatedError], message: str, path: str | None, line: int | None, field: str | None) -> Any:
    return cls(message, path=path, line=line, field=field)
