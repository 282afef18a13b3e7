"""Record locations: URI forms, redaction, listing refresh and the sorting of storage failures."""

from __future__ import annotations

from pathlib import Path

import pytest

from airflow_metric_gate.readiness import check_record
from airflow_metric_gate.records import RecordError
from airflow_metric_gate.storage import (
    StorageUnavailable,
    is_unreachable,
    record_path,
    redact,
    refresh,
    split_conn_id,
    storage_errors,
)


def test_conn_id_is_split_from_the_uri():
    assert split_conn_id("s3://aws_training@bucket/night") == ("aws_training", "s3://bucket/night")
    assert split_conn_id("s3://bucket/night") == (None, "s3://bucket/night")


def test_a_password_in_the_uri_is_masked():
    assert redact("s3://key:topsecret@bucket/night") == "s3://key:***@bucket/night"
    assert redact("s3://conn@bucket/night") == "s3://conn@bucket/night"
    assert redact("/data/night") == "/data/night"


def test_local_paths_stay_local(tmp_path):
    assert record_path(str(tmp_path)) == Path(tmp_path)


class _CachingFS:
    """A filesystem with a listing cache, like s3fs: records what was invalidated."""

    def __init__(self) -> None:
        self.invalidated: list[str] = []

    def invalidate_cache(self, path=None):
        self.invalidated.append(path)


class _Path:
    def __init__(self, fs, path: str) -> None:
        self.fs, self.path = fs, path

    @property
    def parent(self):
        return _Path(self.fs, self.path.rsplit("/", 1)[0])

    @property
    def name(self):
        return self.path.rsplit("/", 1)[1]

    def __truediv__(self, other):
        return _Path(self.fs, f"{self.path}/{other}")

    def __str__(self):
        return f"mem://{self.path}"

    def is_dir(self):
        return True

    def exists(self):
        return False


def test_every_readiness_check_drops_the_cached_listing_of_the_record_and_its_parent():
    fs = _CachingFS()
    path = _Path(fs, "bucket/nightly/2026-11-30")
    check_record(path)
    check_record(path)
    assert fs.invalidated == ["bucket/nightly/2026-11-30", "bucket/nightly"] * 2


def test_refresh_is_a_no_op_for_local_paths(tmp_path):
    refresh(tmp_path)


class _ClientError(Exception):
    def __init__(self, code: str, status: int) -> None:
        super().__init__(code)
        self.response = {"Error": {"Code": code}, "ResponseMetadata": {"HTTPStatusCode": status}}


@pytest.mark.parametrize(
    ("err", "unreachable"),
    [
        (ConnectionRefusedError("refused"), True),
        (TimeoutError("slow"), True),
        (_ClientError("SlowDown", 503), True),
        (_ClientError("InternalError", 500), True),
        (_ClientError("AccessDenied", 403), False),
        (FileNotFoundError("gone"), False),
        (PermissionError("denied"), False),
    ],
)
def test_unreachable_storage_is_told_from_bad_input(err, unreachable):
    assert is_unreachable(err) is unreachable


def test_storage_errors_sort_failures_and_name_the_location():
    with pytest.raises(StorageUnavailable, match="cannot reach the storage of s3://key:\\*\\*\\*@b/n"):
        with storage_errors("s3://key:topsecret@b/n"):
            try:
                raise ConnectionRefusedError("refused")
            except OSError as err:
                raise RecordError("cannot read", path="s3://b/n") from err
    refused = r"s3://b/n: access refused \(PermissionError: denied\): check the storage credentials"
    with pytest.raises(RecordError, match=refused):
        with storage_errors("s3://b/n"):
            raise PermissionError("denied")
    with pytest.raises(KeyError):  # a bug is not a storage failure
        with storage_errors("s3://b/n"):
            raise KeyError("x")
