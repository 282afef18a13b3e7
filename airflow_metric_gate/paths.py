"""The text of a location (a record, a gates file, a store): where a path-like object becomes a string.

See also :func:`airflow_metric_gate.storage.record_path`, which turns a record location into a
pathlib-like object.
"""

from __future__ import annotations

import os

__all__ = ["location_text"]


def location_text(location: str | os.PathLike[str]) -> str:
    """Return a location as text: a string as given, a path-like object's file system path.

    A string may be a local path or a URL such as ``s3://bucket/key``.  Nothing is stripped,
    resolved or checked: an empty string stays empty, for the caller to refuse.

    :param location: a string or an :class:`os.PathLike` object.
    :raises TypeError: ``location`` is neither (as :func:`os.fspath` raises).
    """
    return os.fspath(location)
