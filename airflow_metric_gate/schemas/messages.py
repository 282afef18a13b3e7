"""Turning marshmallow's error messages into the one-sentence messages users read."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def format_errors(messages: Any) -> str:
    """Flatten marshmallow error messages into one readable sentence.

    ``{"series": ["point 3: ..."]}`` becomes ``field 'series': point 3: ...``.

    :param messages: ``ValidationError.messages``.
    """
    if isinstance(messages, dict):
        parts = []
        for key, value in messages.items():
            text = format_errors(value)
            parts.append(text if key == "_schema" else f"field {key!r}: {text}")
        return "; ".join(parts)
    if isinstance(messages, (list, tuple)):
        return "; ".join(format_errors(m) for m in messages)
    return str(messages)


def first_field(messages: Any) -> str | None:
    """Return the first field named by marshmallow error messages, or ``None`` (schema-level only).

    :param messages: ``ValidationError.messages``.
    """
    if isinstance(messages, Mapping):
        for key in messages:
            if key != "_schema":
                return str(key)
    return None
