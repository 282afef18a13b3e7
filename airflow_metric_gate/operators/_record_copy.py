"""A worker-local copy of a record on object storage, so that a night is downloaded once.

``IngestRecordOperator`` reads the record from object storage and, while reading, keeps the
bytes it read in a local folder, with a manifest of each file's SHA-256.  It passes the manifest's
digest on in its (small) XCom summary.  ``SelectStepsOperator`` on the same machine finds the copy
by location and digest, checks every file against the manifest, and reads the copy instead of
the storage; it removes the copy once it has selected.  Anything amiss (no copy: another
machine, a cleaned temporary folder; a file that does not match) and select reads the storage
as before.  Local records are never copied.

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

from airflow_metric_gate.records import Record, RecordError, read_record

MANIFEST = "manifest.json"
MAX_AGE_SECONDS = 2 * 24 * 3600
_CHUNK = 1 << 20


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


class _Copying:
    """A record path (file or directory) whose files, as they are read, are copied to ``folder``."""

    def __init__(self, path: Any, folder: Path, files: list[dict[str, Any]]) -> None:
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
        target = self._folder / self._path.name
        sink = target.open("wb")
        entry: dict[str, Any] = {"name": self._path.name, "sha256": None}
        self._files.append(entry)

        def done() -> None:
            entry["sha256"] = sha.hexdigest()
            entry["size"] = target.stat().st_size

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


def read_and_copy(path: Any, location: str, *, format: str) -> tuple[Record, str | None]:
    """Read a record; when it is on object storage, keep a verified local copy for select.

    :param path: the record path (``ObjectStoragePath`` or local path).
    :param location: the location string select will receive.
    :param format: the record format.
    :return: the record and the copy's digest (``None``: no copy, a local record or a failed copy).
    :raises RecordError: the record is malformed (naming the storage URI and line).
    """
    if not is_remote(path):
        return read_record(path, format=format), None
    root = cache_root()
    try:
        root.mkdir(parents=True, exist_ok=True, mode=0o700)
        _prune(root)
        staging = Path(tempfile.mkdtemp(prefix=".staging-", dir=root))
    except OSError:
        return read_record(path, format=format), None
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
        return record, digest
    except RecordError:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    except OSError:  # the local copy failed (disk full...): select will read the storage
        shutil.rmtree(staging, ignore_errors=True)
        return read_record(path, format=format), None


def read_copy(location: str, digest: Any, *, format: str) -> Record | None:
    """Read the local copy ingest made of a record, if it is here and intact; else ``None``.

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
    """Remove the local copy of a record once selected.

    :param location: the record location.
    :param digest: the digest ingest returned.
    """
    if isinstance(digest, str) and len(digest) == 64:
        shutil.rmtree(_folder(location, digest), ignore_errors=True)


