"""Where records live: local paths and object-storage URIs, and what can go wrong reading them.

A record location is a local path or a URI (``s3://bucket/key``, ``gs://...``, ``file://...``),
optionally naming an Airflow connection as ``s3://conn_id@bucket/key``.  :func:`record_path` turns
it into a pathlib-like object: an ``airflow.sdk.ObjectStoragePath`` when an Airflow provider
serves the scheme (the connection, or the provider's default credentials when the connection is
not defined), else a ``upath.UPath`` on the fsspec filesystem's own configuration.

fsspec filesystems keep a directory listing cache per process, and Airflow keeps one filesystem
per connection for the life of the process: a listing taken once is served again later.
:func:`refresh` drops the cached listings a check is about to rely on, so that it sees the
storage as it is now.

:func:`storage_errors` sorts reading failures into the two kinds a caller acts on:
:class:`StorageUnavailable` (the storage could not be reached: retry later) and
:class:`~airflow_metric_gate.records.RecordError` (bad URI, no such object, refused or missing
credentials: retrying does not help).  Messages name the location, never a secret.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from airflow_metric_gate.errors import UnavailableError
from airflow_metric_gate.records import RecordError

# Exceptions of storage client libraries that mean "could not reach the storage" (by class name,
# so that none of these libraries has to be installed).
_UNREACHABLE_ERRORS = frozenset(
    {
        "EndpointConnectionError",
        "ConnectTimeoutError",
        "ReadTimeoutError",
        "ConnectionClosedError",
        "ProxyConnectionError",
        "ClientConnectorError",
        "ClientConnectionError",
        "ServerDisconnectedError",
        "ServerTimeoutError",
        "ServiceUnavailable",
        "TransportError",
        "RetryError",
    }
)
# Error codes of object stores that mean "the storage is there but cannot serve now".
_UNREACHABLE_CODES = frozenset(
    {"InternalError", "ServiceUnavailable", "SlowDown", "RequestTimeout", "Throttling", "ThrottlingException"}
)
# Modules whose exceptions are storage failures (anything else is a bug and propagates).
_STORAGE_MODULES = ("botocore", "aiobotocore", "s3fs", "fsspec", "aiohttp", "gcsfs", "adlfs", "azure", "google",
                    "upath", "requests", "urllib3")
# Exceptions that mean "the storage refused the credentials, or there are none".
_CREDENTIAL_ERRORS = frozenset({"NoCredentialsError", "PartialCredentialsError", "CredentialRetrievalError",
                                "DefaultCredentialsError", "RefreshError", "ClientAuthenticationError"})
_CREDENTIAL_CODES = frozenset({"AccessDenied", "InvalidAccessKeyId", "SignatureDoesNotMatch", "ExpiredToken",
                               "InvalidToken", "Forbidden", "403"})
_CREDENTIALS_HINT = (
    "check the storage credentials (the Airflow connection named in the URI or by storage_conn_id, "
    "else the environment's)"
)
_USERINFO = re.compile(r"^([a-zA-Z][a-zA-Z0-9+.-]*://)([^/@]*)@")


class StorageUnavailable(UnavailableError):
    """The storage holding a record could not be reached; retrying later may succeed."""


def is_uri(location: str) -> bool:
    """Return whether a location string is a URI (``scheme://...``) rather than a local path.

    :param location: the location.
    """
    return "://" in location


def redact(location: str) -> str:
    """Return a location fit for messages: a password in its user part (``scheme://user:secret@``) masked.

    :param location: the location.
    """
    match = _USERINFO.match(location)
    if match is None or ":" not in match.group(2):
        return location
    user = match.group(2).split(":", 1)[0]
    return f"{match.group(1)}{user}:***@{location[match.end():]}"


def split_conn_id(location: str) -> tuple[str | None, str]:
    """Split ``scheme://conn_id@rest`` into the connection id and ``scheme://rest``.

    :param location: a URI.
    :return: ``(conn_id, uri without it)``; ``(None, location)`` when the URI names no connection.
    """
    match = _USERINFO.match(location)
    if match is None or not match.group(2):
        return None, location
    return match.group(2), match.group(1) + location[match.end():]


def _airflow_serves(scheme: str) -> bool:
    try:
        from airflow.sdk.io.fs import has_fs
    except ImportError:  # pragma: no cover - Airflow is a dependency, but the CLI works without it
        return False
    try:
        return has_fs(scheme)
    except Exception:  # a broken provider: fall back to fsspec
        return False


def record_path(location: Any, conn_id: str | None = None) -> Any:
    """Return the pathlib-like object of a record location.

    :param location: a local path, a URI (``s3://[conn_id@]bucket/key``, ``file://...``) or
        already a pathlib-like object (returned as is).
    :param conn_id: the Airflow connection of the storage; ``None`` uses the one named in the URI,
        else the filesystem's default credentials.
    :raises RecordError: the location is empty or not a usable URI.
    """
    if not isinstance(location, str):
        return location
    location = location.strip()
    if not location:
        raise RecordError("no record location given")
    if not is_uri(location):
        return Path(location)
    scheme = location.split("://", 1)[0].lower()
    try:
        if _airflow_serves(scheme):
            from airflow.sdk import ObjectStoragePath

            return ObjectStoragePath(location, conn_id=conn_id)
        from upath import UPath

        named, plain = split_conn_id(location)
        return UPath(plain if named is not None and ":" not in named else location)
    except (ValueError, TypeError, ImportError) as err:
        raise RecordError(f"not a usable record location: {describe(err)}", path=redact(location)) from err


def refresh(path: Any) -> None:
    """Drop the cached directory listings of ``path`` and its parent, so the next look is live.

    Works on any fsspec-backed path (``ObjectStoragePath``, ``UPath``); a no-op for local paths.

    :param path: a pathlib-like object.
    """
    fs = getattr(path, "fs", None)
    invalidate = getattr(fs, "invalidate_cache", None)
    if invalidate is None:
        return
    targets = [path]
    parent = getattr(path, "parent", None)
    if parent is not None:
        targets.append(parent)
    for target in targets:
        key = getattr(target, "path", None)
        invalidate(key if isinstance(key, str) else str(target))


def _chain(err: BaseException) -> Iterator[BaseException]:
    seen: set[int] = set()
    current: BaseException | None = err
    while current is not None and id(current) not in seen and len(seen) < 20:
        seen.add(id(current))
        yield current
        current = current.__cause__ or current.__context__


def _error_code(err: BaseException) -> tuple[str | None, int | None]:
    response = getattr(err, "response", None)
    if not isinstance(response, dict):
        return None, None
    code = (response.get("Error") or {}).get("Code")
    status = (response.get("ResponseMetadata") or {}).get("HTTPStatusCode")
    return code, status if isinstance(status, int) else None


def is_unreachable(err: BaseException) -> bool:
    """Return whether an exception (or one it was raised from) says the storage could not be reached.

    :param err: the exception.
    """
    for e in _chain(err):
        if isinstance(e, (ConnectionError, TimeoutError)) or type(e).__name__ in _UNREACHABLE_ERRORS:
            return True
        code, status = _error_code(e)
        if code in _UNREACHABLE_CODES or (status is not None and status >= 500):
            return True
    return False


def is_refused(err: BaseException) -> bool:
    """Return whether an exception (or one it was raised from) says the credentials were refused or missing.

    :param err: the exception.
    """
    for e in _chain(err):
        if isinstance(e, PermissionError) or type(e).__name__ in _CREDENTIAL_ERRORS:
            return True
        code, status = _error_code(e)
        if code in _CREDENTIAL_CODES or status in (401, 403):
            return True
    return False


def describe(err: BaseException) -> str:
    """Return a one-line description of a storage exception: its type and message.

    :param err: the exception.
    """
    text = " ".join(str(err).split()) or "no detail"
    return f"{type(err).__name__}: {text}"


def _is_storage_error(err: BaseException) -> bool:
    if isinstance(err, (OSError, ValueError)):
        return True
    module = type(err).__module__ or ""
    return module.split(".", 1)[0] in _STORAGE_MODULES


@contextmanager
def storage_errors(location: Any) -> Iterator[None]:
    """Sort the failures of reading a record into retryable and not.

    :param location: the record location, for messages.
    :raises StorageUnavailable: the storage could not be reached (retry later).
    :raises RecordError: anything else wrong with the location or the storage's answer (bad
        URI, no such object, refused or missing credentials), or the record itself.
    """
    where = redact(str(location))
    try:
        yield
    except RecordError as err:
        cause = err.__cause__
        if cause is not None and is_unreachable(cause):
            raise StorageUnavailable(f"cannot reach the storage of {where}: {describe(cause)}") from err
        if cause is not None and is_refused(cause):
            raise RecordError(f"access refused ({describe(cause)}): {_CREDENTIALS_HINT}", path=where) from err
        raise
    except StorageUnavailable:
        raise
    except Exception as err:
        if is_unreachable(err):
            raise StorageUnavailable(f"cannot reach the storage of {where}: {describe(err)}") from err
        if not _is_storage_error(err):
            raise
        if is_refused(err):
            raise RecordError(f"access refused ({describe(err)}): {_CREDENTIALS_HINT}", path=where) from err
        raise RecordError(f"cannot read: {describe(err)}", path=where) from err
