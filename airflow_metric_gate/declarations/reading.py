"""Reading a gates file's text from a local path or an object-storage URI, refusing what is not a file."""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import Any

from airflow_metric_gate.declarations.model import DeclarationError

__all__ = ["read_text"]


def _open_path(path: Any) -> Any:
    if isinstance(path, str) and "://" in path:
        from upath import UPath

        return UPath(path)
    if isinstance(path, (str, os.PathLike)) and not hasattr(path, "read_text"):
        return Path(path)
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


def read_text(path: Any, name: str) -> str:
    try:
        opened = _open_path(path)
        _refuse_special_file(opened, name)
        return opened.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise DeclarationError("no such gates file", path=name) from None
    except (OSError, UnicodeDecodeError) as err:
        raise DeclarationError(f"cannot read the gates file: {err}", path=name) from None
