"""The files of a record: its location, which entries of a directory are read, and how a file is opened.

A local path is classified with ``stat`` before anything is opened; object storage is asked
through its pathlib-like interface.  See also :mod:`airflow_metric_gate.readiness`, which uses the
same name rules to tell whether a record is complete.
"""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path
from typing import Any

from airflow_metric_gate.enums import RecordFormat
from airflow_metric_gate.paths import location_text
from airflow_metric_gate.records.model import RecordError


def is_data_file_name(name: str, format: str = "series") -> bool:
    """Return whether a file in a record directory holds record data.

    Temporary files (``*.tmp``) and names starting with ``.`` or ``_`` (such as a ``_SUCCESS``
    completion marker) are skipped; so are, in a ``tensorboard`` record, names without
    ``tfevents`` and, in a ``csv`` record, names not ending with ``.csv``.

    :param name: the file name.
    :param format: the record format.
    """
    return skip_reason(name, format) is None


def _as_path(location: Any) -> Any:
    """Turn a location into a pathlib-like object."""
    if location is None or (isinstance(location, str) and not location.strip()):
        raise RecordError("no record location given")
    if isinstance(location, str) and "://" in location:
        try:
            from upath import UPath
        except ImportError as err:  # pragma: no cover - universal_pathlib ships with Airflow
            raise RecordError(
                "reading a URI needs universal_pathlib; pass an ObjectStoragePath instead", path=location
            ) from err
        return UPath(location)
    if isinstance(location, (str, os.PathLike)) and not hasattr(location, "iterdir"):
        return Path(location_text(location))
    if not all(hasattr(location, attr) for attr in ("is_dir", "iterdir", "open")):
        raise RecordError(f"not a path: {location!r} (give a path, a URI or a pathlib-like object)")
    return location


#: Why a record directory entry named like a completion marker (``_SUCCESS``) is not read.
MARKER_SKIP = "marker file: the name starts with '_'"


def skip_reason(name: str, format: str = "series") -> str | None:
    """Return why a record directory entry is skipped by its name, or ``None`` when it is read.

    :param name: the file name.
    :param format: the record format: a ``tensorboard`` directory reads only event files (names
        holding ``tfevents``, as TensorBoard reads them), a ``csv`` directory only ``*.csv`` files.
    """
    if name.startswith("."):
        return "hidden file: the name starts with '.'"
    if name.startswith("_"):
        return MARKER_SKIP
    if name.endswith(".tmp"):
        return "temporary file: the name ends with '.tmp'"
    if format == RecordFormat.TENSORBOARD and "tfevents" not in name:
        return "not a TensorBoard event file: the name does not contain 'tfevents'"
    if format == RecordFormat.CSV and not name.lower().endswith(".csv"):
        return "not a CSV log: the name does not end with '.csv'"
    return None


_SPECIAL_KINDS = (
    (stat.S_ISFIFO, "a FIFO (named pipe)"),
    (stat.S_ISSOCK, "a socket"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
)


def _local_path(path: Any) -> Path | None:
    """The local file system path of ``path``, or ``None`` for object storage."""
    protocol = getattr(path, "protocol", None)
    if protocol is None:
        return path if isinstance(path, Path) else None
    if protocol in ("", "file", "local") and isinstance(getattr(path, "path", None), str):
        return Path(path.path)
    return None


def _local_kind(path: Path) -> str:
    """Classify a local path without opening it: ``file``, ``dir``, or raise naming what is wrong."""
    try:
        mode = path.stat().st_mode
    except FileNotFoundError:
        if path.is_symlink():
            raise RecordError("broken symbolic link: its target does not exist", path=str(path)) from None
        raise RecordError("no such file or directory", path=str(path)) from None
    except OSError as err:
        if err.errno == errno.ELOOP:
            raise RecordError("symbolic link loop: the link never reaches a file", path=str(path)) from None
        raise RecordError(f"cannot read: {err.strerror or err}", path=str(path)) from err
    if stat.S_ISREG(mode):
        return "file"
    if stat.S_ISDIR(mode):
        return "dir"
    kind = next((name for test, name in _SPECIAL_KINDS if test(mode)), "a special file")
    raise RecordError(f"not a regular file ({kind}); a record is a file or a directory of files", path=str(path))


def _data_files(path: Any, format: str = "series") -> tuple[list[Any], bool, list[tuple[str, str]]]:
    """Return the files to read, whether ``path`` is a directory, and the entries skipped.

    Local paths are classified with ``stat`` before anything is opened: FIFOs, sockets, devices,
    broken symbolic links and link loops are errors, in a directory too (a data file that cannot
    be read would leave the record incomplete).  Subdirectories and names skipped by
    :func:`skip_reason` are reported as skipped.
    """
    local = _local_path(path) is not None
    skipped: list[tuple[str, str]] = []
    try:
        if local:
            if _local_kind(_local_path(path)) == "file":  # type: ignore[arg-type]  # local: a Path
                return [path], False, skipped
        else:
            if not path.exists():
                raise RecordError("no such file or directory", path=str(path))
            if not path.is_dir():
                return [path], False, skipped
        children = []
        for child in path.iterdir():
            reason = skip_reason(child.name, format)
            if reason is None:
                if local:
                    kind = _local_kind(_local_path(child))  # type: ignore[arg-type]  # local: a Path
                else:
                    kind = "dir" if child.is_dir() else "file" if child.is_file() else ""
                if kind == "dir":
                    reason = "a directory: only the files directly inside the record directory are read"
                elif kind != "file":
                    reason = "neither a file nor a directory"
            if reason is None:
                children.append(child)
            else:
                skipped.append((str(child), reason))
    except OSError as err:
        raise RecordError(f"cannot read: {err}", path=str(path)) from err
    if not children:
        wanted_files: dict[str, str] = {
            RecordFormat.TENSORBOARD: "; only event files (names holding 'tfevents') are read",
            RecordFormat.CSV: "; only *.csv files are read",
        }
        wanted = wanted_files.get(format, "")
        raise RecordError(
            f"directory holds no record file (names starting with '.' or '_' and *.tmp files are skipped{wanted})",
            path=str(path),
        )
    skipped.sort()
    return sorted(children, key=lambda c: c.name), True, skipped


#: Read buffer for local record files: a ``series`` line holds a whole metric, often more than the
#: default 8 KiB, and a line longer than the buffer is read in many pieces.
_READ_BUFFER = 1 << 16


def _open_binary(file: Any) -> Any:
    """Open a record file for reading bytes; a local file with a larger buffer (:data:`_READ_BUFFER`)."""
    local = _local_path(file)
    if local is not None:
        return open(local, "rb", buffering=_READ_BUFFER)
    return file.open("rb")
