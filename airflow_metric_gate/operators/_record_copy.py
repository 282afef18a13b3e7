"""A record's checksum, and a worker-local copy of a record on object storage.

Every record is pinned by a checksum: the SHA-256 of a manifest listing each file read (name,
SHA-256, size) and whether the record is a directory.  ``IngestRecordOperator`` computes it and
passes it on in its XCom summary; ``PersistValuesOperator`` reads the record again, checks it
against the checksum (:class:`RecordChanged` when it differs) and selects the values there, so
that no value travels through XCom.

A record on object storage is hashed while it is read, and its bytes are kept in a local folder
with the manifest, so that a night is downloaded once: persist on the same machine finds the
copy by location and checksum, checks every file against the manifest, and reads the copy instead
of the storage; it removes the copy once the values are stored.  Anything amiss (no copy: another
machine, a cleaned temporary folder; a file that does not match) and persist reads the storage
again, checked against the same checksum.  Local records are never copied; their files are hashed
after they are read.

The copies live under ``[metric_gate] record_copy_dir`` (default: ``metric-gate-records`` in
the system's temporary folder), one folder per record and digest, written atomically; copies
older than two days (ingest without a select) are removed by the next ingest.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from airflow_metric_gate.errors import BadInputError
from airflow_metric_gate.records import Record, RecordError, read_record

MANIFEST = "manifest.json"
MAX_AGE_SECONDS = 2 * 24 * 3600
_CHUNK = 1 << 20


class RecordChanged(BadInputError):
    """The record is not the one whose checksum was passed on: it changed after it was read.

    :param location: the record location.
    :param expected: the checksum passed on.
    :param found: the checksum of the record read now.
    """

    def __init__(self, location: str, expected: str, found: str) -> None:
        self.location = location
        super().__init__(
            f"the training record {location} changed after it was ingested (checksum {found[:12]}..., "
            f"expected {expected[:12]}...); nothing was stored. A record must not change once complete: "
            "write each night to a new location, or clear the night's tasks from the ingest task on"
        )


def cache_root() -> Path:
    """Return the folder holding the record copies."""
    try:
        from airflow.sdk import conf

        configured = conf.get("metric_gate", "record_copy_dir", fallback="") or ""
    except Exception:  # pragma: no cover - no Airflow configuration
        configured = ""
    return Path(configured) if configured.strip() else Path(tempfile.gettempdir()) / "metric-gate-records"


def is_remote(path: Any) -> bool:
    """Return whether a record path lives on object storage (not local disk).

    :param path: a pathlib-like object.
    """
    fs = getattr(path, "fs", None)
    if fs is None:
        return False
    protocol = fs.protocol if isinstance(fs.protocol, (tuple, list)) else (fs.protocol,)
    return not ({"file", "local"} & set(protocol))


def _folder(location: str, digest: str) -> Path:
    return cache_root() / f"{hashlib.sha256(location.encode()).hexdigest()[:16]}-{digest[:16]}"


def _digest(files: list[dict[str, Any]], directory: bool) -> str:
    text = json.dumps({"directory": directory, "files": files}, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()


class _Tee:
    """A binary file read by line or block, whose bytes are also written to a local file and hashed."""

    def __init__(self, source: Any, sink: Any, sha: Any, on_close: Callable[[], None]) -> None:
        self._source = source
        self._sink = sink
        self._sha = sha
        self._on_close = on_close
        self._closed = False

    def _keep(self, data: bytes) -> bytes:
        self._sink.write(data)
        self._sha.update(data)
        return data

    def read(self, size: int = -1) -> bytes:
        return self._keep(self._source.read(size))

    def readline(self, size: int = -1) -> bytes:
        return self._keep(self._source.readline() if size < 0 else self._source.readline(size))

    def __iter__(self) -> Any:
        return self

    def __next__(self) -> bytes:
        line = self.readline()
        if not line:
            raise StopIteration
        return line

    def __enter__(self) -> _Tee:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        try:
            self._source.close()
        finally:
            self._sink.close()
            self._on_close()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._source, name)


class _Counter:
    """A sink that keeps nothing but the number of bytes written (hashing without a copy)."""

    size = 0

    def write(self, data: bytes) -> None:
        self.size += len(data)

    def close(self) -> None:
        pass


class _Copying:
    """A record path (file or directory) whose files, as they are read, are copied to ``folder``."""

    def __init__(self, path: Any, folder: Path | None, files: list[dict[str, Any]]) -> None:
        self._path = path
        self._folder = folder
        self._files = files

    def iterdir(self) -> Any:
        for child in self._path.iterdir():
            yield _Copying(child, self._folder, self._files)

    def open(self, mode: str = "r", *args: Any, **kwargs: Any) -> Any:
        if mode != "rb":
            return self._path.open(mode, *args, **kwargs)
        source = self._path.open("rb")
        sha = hashlib.sha256()
        target = None if self._folder is None else self._folder / self._path.name
        sink = _Counter() if target is None else target.open("wb")
        entry: dict[str, Any] = {"name": self._path.name, "sha256": None}
        self._files.append(entry)

        def done() -> None:
            entry["sha256"] = sha.hexdigest()
            entry["size"] = sink.size if target is None else target.stat().st_size

        return _Tee(source, sink, sha, done)

    def __truediv__(self, other: str) -> _Copying:
        return _Copying(self._path / other, self._folder, self._files)

    def __str__(self) -> str:
        return str(self._path)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._path, name)


def _prune(root: Path) -> None:
    now = time.time()
    try:
        entries = list(root.iterdir())
    except OSError:
        return
    for entry in entries:
        try:
            if now - entry.stat().st_mtime > MAX_AGE_SECONDS:
                shutil.rmtree(entry, ignore_errors=True)
        except OSError:
            pass


def _local_file(source: str) -> Path:
    """The local file a record source names (a path, or a ``file://`` URI)."""
    if "://" in source:
        return Path(urlsplit(source).path)
    return Path(source)


def _file_entry(file: Path) -> dict[str, Any]:
    sha = hashlib.sha256()
    size = 0
    with file.open("rb") as fh:
        while chunk := fh.read(_CHUNK):
            sha.update(chunk)
            size += len(chunk)
    return {"name": file.name, "sha256": sha.hexdigest(), "size": size}


def local_checksum(record: Record, directory: bool) -> str:
    """Return the checksum of a local record from its files (those :attr:`Record.sources` lists).

    :param record: the record, as read.
    :param directory: whether the record is a directory.
    """
    files = [_file_entry(_local_file(source)) for source in record.sources]
    return _digest(sorted(files, key=lambda f: f["name"]), directory)


def read_pinned(path: Any, location: str, *, format: str, keep_copy: bool = True) -> tuple[Record, str, bool]:
    """Read a record and its checksum; keep a verified local copy of a record on object storage.

    :param path: the record path (``ObjectStoragePath`` or local path).
    :param location: the location string persist will receive.
    :param format: the record format.
    :param keep_copy: keep the local copy of a record on object storage (for the next task).
    :return: the record, its checksum, and whether a local copy was kept.
    :raises RecordError: the record is malformed (naming the storage URI and line).
    """
    if not is_remote(path):
        record = read_record(path, format=format)
        try:
            return record, local_checksum(record, path.is_dir()), False
        except OSError as err:
            raise RecordError(f"cannot read: {err.strerror or err}", path=location) from err
    staging = None
    if keep_copy:
        root = cache_root()
        try:
            root.mkdir(parents=True, exist_ok=True, mode=0o700)
            _prune(root)
            staging = Path(tempfile.mkdtemp(prefix=".staging-", dir=root))
        except OSError:
            staging = None
    if staging is not None:
        files: list[dict[str, Any]] = []
        try:
            data = staging / "data"
            data.mkdir()
            record = read_record(_Copying(path, data, files), format=format)
            directory = path.is_dir()
            digest = _digest(sorted(files, key=lambda f: f["name"]), directory)
            (staging / MANIFEST).write_text(json.dumps({"location": location, "directory": directory, "files": files}))
            final = _folder(location, digest)
            if final.exists():  # the same bytes, copied before (a retry)
                shutil.rmtree(staging, ignore_errors=True)
            else:
                os.rename(staging, final)
            return record, digest, True
        except RecordError:
            shutil.rmtree(staging, ignore_errors=True)
            raise
        except OSError:  # the local copy failed (disk full...): hash without a copy
            shutil.rmtree(staging, ignore_errors=True)
    files = []
    record = read_record(_Copying(path, None, files), format=format)
    return record, _digest(sorted(files, key=lambda f: f["name"]), path.is_dir()), False


def read_checked(path: Any, location: str, checksum: str, *, format: str) -> tuple[Record, bool]:
    """Read a record again and check it is the one ``checksum`` pins: the local copy when intact here.

    :param path: the record path, used when there is no intact local copy.
    :param location: the record location.
    :param checksum: the checksum ingest passed on.
    :param format: the record format.
    :return: the record, and whether it was read from the local copy.
    :raises RecordChanged: the record read now has another checksum.
    :raises RecordError: the record is malformed.
    """
    record = read_copy(location, checksum, format=format)
    if record is not None:
        return record, True
    record, found, _ = read_pinned(path, location, format=format, keep_copy=False)
    if found != checksum:
        raise RecordChanged(location, checksum, found)
    return record, False


def read_copy(location: str, digest: Any, *, format: str) -> Record | None:
    """Read the local copy ingest made of a record, if it is here and intact; else ``None``.

    Intact means: its manifest has the digest ``digest`` and every file matches its SHA-256.

    :param location: the record location.
    :param digest: the digest ingest returned (``None`` or not a string: no copy).
    :param format: the record format.
    """
    if not isinstance(digest, str) or len(digest) != 64:
        return None
    folder = _folder(location, digest)
    try:
        manifest = json.loads((folder / MANIFEST).read_text())
        if manifest.get("location") != location:
            return None
        files = manifest["files"]
        directory = bool(manifest["directory"])
        if _digest(sorted(files, key=lambda f: f["name"]), directory) != digest:
            return None
        data = folder / "data"
        for entry in files:
            sha = hashlib.sha256()
            with (data / entry["name"]).open("rb") as fh:
                while chunk := fh.read(_CHUNK):
                    sha.update(chunk)
            if sha.hexdigest() != entry["sha256"]:
                return None
        target = data if directory else data / files[0]["name"]
        return read_record(target, format=format)
    except (OSError, ValueError, KeyError, TypeError, IndexError):  # no copy, or not one this code wrote
        return None


def drop_copy(location: str, digest: Any) -> None:
    """Remove the local copy of a record once its values are stored.

    :param location: the record location.
    :param digest: the digest ingest returned.
    """
    if isinstance(digest, str) and len(digest) == 64:
        shutil.rmtree(_folder(location, digest), ignore_errors=True)


