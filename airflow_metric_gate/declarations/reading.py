"""Reading a gates file's text from a local path or an object-storage URI, refusing what is not a file.

Text is decoded as the file says: a YAML or JSON file is UTF-8, with or without a byte order mark;
a Python file follows Python's own rules (a byte order mark, or a ``# -*- coding: ... -*-`` cookie
on its first two lines), as the interpreter reads it.
"""

from __future__ import annotations

import io
import os
import stat
import tokenize
from pathlib import Path
from typing import Any

from airflow_metric_gate.declarations.model import DeclarationError
from airflow_metric_gate.paths import location_text

__all__ = ["read_text"]


def _open_path(path: Any) -> Any:
    if isinstance(path, str) and "://" in path:
        from upath import UPath

        return UPath(path)
    if isinstance(path, (str, os.PathLike)) and not hasattr(path, "read_text"):
        return Path(location_text(path))
    return path


def _refuse_special_file(path: Any, name: str) -> None:
    """Refuse a local FIFO, socket or device before opening it (a FIFO would block forever)."""
    if not isinstance(path, Path) or hasattr(path, "protocol"):
        return
    try:
        mode = path.stat().st_mode
    except OSError:
        return  # reading reports it
    if not stat.S_ISREG(mode):
        kind = "a directory" if stat.S_ISDIR(mode) else "a FIFO, socket or device"
        raise DeclarationError(f"not a regular file ({kind}); a gates file is a regular file", path=name)


def _python_text(data: bytes) -> str:
    """Decode a Python file as the interpreter does: byte order mark or coding cookie, else UTF-8."""
    encoding, _ = tokenize.detect_encoding(io.BytesIO(data).readline)
    text = data.decode(encoding)
    return text[1:] if text.startswith("\ufeff") else text


def read_text(path: Any, name: str, *, python: bool = False) -> str:
    """Return a gates file's text.

    :param path: the file: a path, a URI string, or a pathlib-like object.
    :param name: names the file in error messages.
    :param python: decode as a Python source file (byte order mark or coding cookie); otherwise
        as UTF-8, a leading byte order mark dropped.
    :raises DeclarationError: the file is missing, not a regular file, unreadable or not decodable.
    """
    try:
        opened = _open_path(path)
        _refuse_special_file(opened, name)
        data = opened.read_bytes()
        if python:
            return _python_text(data)
        return data.decode("utf-8-sig")
    except FileNotFoundError:
        raise DeclarationError("no such gates file", path=name) from None
    except SyntaxError as err:  # an unknown or contradictory coding cookie
        raise DeclarationError(f"cannot read the gates file: {err.msg if hasattr(err, 'msg') else err}",
                               path=name) from None
    except (OSError, UnicodeDecodeError, LookupError) as err:
        raise DeclarationError(f"cannot read the gates file: {err}", path=name) from None
