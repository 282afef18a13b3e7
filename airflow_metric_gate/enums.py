"""The fixed vocabularies of the gate, each written once: statuses, roles, aggregates, record formats.

Each vocabulary is an enumeration whose values are the strings the verdict, the store and the
command line use; the module-level tuples and constants are those strings as plain ``str`` (what
results, verdicts, XCom and the store hold, so nothing but a plain string ever reaches JSON or a
database driver).  :meth:`Choices.problem` is the one check of a value against its vocabulary.
"""

from __future__ import annotations

from enum import Enum
from typing import Any

__all__ = [
    "AGGREGATES",
    "ERROR",
    "FAIL",
    "FILE_FORMATS",
    "INACTIVE",
    "JUDGED_STATUSES",
    "PASS",
    "RECORD_FORMATS",
    "ROLES",
    "RUN_STATUSES",
    "STATUSES",
    "Aggregate",
    "Choices",
    "ErrorKind",
    "RecordFormat",
    "Role",
    "RunStatus",
    "Status",
]


class Choices(str, Enum):
    """A vocabulary of strings; a member formats and prints as its value."""

    def __str__(self) -> str:
        return str(self.value)

    def __format__(self, spec: str) -> str:
        return format(str(self.value), spec)

    @classmethod
    def values(cls) -> tuple[str, ...]:
        """Return the values, in declaration order, as plain strings."""
        return tuple(str(member.value) for member in cls)

    @classmethod
    def problem(cls, value: Any, what: str) -> str | None:
        """Return why ``value`` is not in the vocabulary, or ``None`` when it is.

        :param value: the value to check.
        :param what: the name of the setting, for the message (``"role"``).
        """
        choices = cls.values()
        if isinstance(value, str) and value in choices:
            return None
        return f"{what} must be one of {', '.join(choices)}, got {value!r}"


class ErrorKind(Choices):
    """The two kinds of the package's errors (see :mod:`airflow_metric_gate.errors`)."""

    BAD_INPUT = "bad input"
    UNAVAILABLE = "unavailable"


class Status(Choices):
    """The status of one result (SPEC 6)."""

    PASS = "PASS"
    FAIL = "FAIL"
    INACTIVE = "INACTIVE"
    ERROR = "ERROR"


class RunStatus(Choices):
    """The status of a stored run: ``pending`` until judged, then trusted or not (SPEC 7)."""

    PENDING = "pending"
    TRUSTED = "trusted"
    UNTRUSTED = "untrusted"


class Role(Choices):
    """Whether a run feeds future baselines (``baseline``) or is only audited (``shadow``)."""

    BASELINE = "baseline"
    SHADOW = "shadow"


class Aggregate(Choices):
    """How the baseline values of a coordinate become its reference."""

    MEAN = "mean"
    MEDIAN = "median"


class RecordFormat(Choices):
    """The layouts a record may have (SPEC 2)."""

    SERIES = "series"
    ROWS = "rows"
    TENSORBOARD = "tensorboard"
    MLFLOW = "mlflow"
    CSV = "csv"


PASS: str = Status.PASS.value
FAIL: str = Status.FAIL.value
INACTIVE: str = Status.INACTIVE.value
ERROR: str = Status.ERROR.value
#: Result statuses, in the order verdicts list their counts.
STATUSES: tuple[str, ...] = Status.values()
#: Stored run statuses.
RUN_STATUSES: tuple[str, ...] = RunStatus.values()
#: The statuses a judged (or hand-marked) run may have.
JUDGED_STATUSES: tuple[str, ...] = (RunStatus.TRUSTED.value, RunStatus.UNTRUSTED.value)
ROLES: tuple[str, ...] = Role.values()
AGGREGATES: tuple[str, ...] = Aggregate.values()
RECORD_FORMATS: tuple[str, ...] = RecordFormat.values()
#: The record formats read from files (a file, or a directory of files) rather than from a service.
FILE_FORMATS: tuple[str, ...] = tuple(f for f in RECORD_FORMATS if f != RecordFormat.MLFLOW.value)
