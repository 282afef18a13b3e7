"""Untrusted text made safe to print: one line, no terminal control, nothing that forges a log line.

Metric keys, series names, run ids, reasons and file names come from records, gates files and
command lines.  A newline in one of them could start a fake ``metric-gate: ... TRUSTED`` line in a
task log, and an escape sequence could rewrite a terminal.  Everything the package prints of them
goes through :func:`printable`.
"""

from __future__ import annotations

import unicodedata
from typing import Any

#: Unicode categories escaped: control characters, line and paragraph separators, lone surrogates.
_ESCAPED_CATEGORIES = frozenset({"Cc", "Zl", "Zp", "Cs"})
#: Bidirectional overrides and isolates: they reorder what a reader sees.
_BIDI_CONTROLS = frozenset("\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069")
_SHORT = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


def _escape(char: str) -> str:
    if char in _SHORT:
        return _SHORT[char]
    code = ord(char)
    if code <= 0xFF:
        return f"\\x{code:02x}"
    return f"\\u{code:04x}"


def printable(value: Any) -> str:
    """Return ``str(value)`` with control characters escaped as ``\\n``, ``\\x1b``, ``\\u2028``...

    Printable text (the usual case) is returned unchanged; backslashes are kept as they are.

    :param value: the text (anything else is turned into text first).
    """
    text = value if isinstance(value, str) else str(value)
    if text.isprintable():
        return text
    return "".join(
        _escape(c) if c in _BIDI_CONTROLS or unicodedata.category(c) in _ESCAPED_CATEGORIES else c for c in text
    )


def printable_copy(value: Any) -> Any:
    """Return a copy of a JSON-like value (a verdict) with every string made :func:`printable`.

    :param value: dicts, lists and scalars.
    """
    if isinstance(value, str):
        return printable(value)
    if isinstance(value, dict):
        return {k: printable_copy(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [printable_copy(v) for v in value]
    return value
