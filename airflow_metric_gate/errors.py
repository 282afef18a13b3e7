"""The error shape shared by bad records and bad declarations: a message and where it was found."""

from __future__ import annotations

from typing import Any


class LocatedError(ValueError):
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
