"""Dates and times: every date the gate stores or compares is an aware UTC datetime.

A naive datetime (no time zone) is taken as UTC, never as local time, so the same night keys the
same way on every machine (SPEC 4 and 6: logical dates order the history).
"""

from __future__ import annotations

from datetime import datetime, timezone

__all__ = ["parse_datetime", "utc"]


def utc(dt: datetime) -> datetime:
    """Return ``dt`` as an aware UTC datetime (naive datetimes are taken as UTC).

    :param dt: the datetime.
    """
    if dt.tzinfo is None:
        return dt.replace(tzinfo=timezone.utc)
    return dt.astimezone(timezone.utc)


def parse_datetime(text: str, what: str) -> datetime:
    """Read an ISO 8601 date or datetime (``Z`` allowed), as written: naive when it has no offset.

    Check its range (:func:`~airflow_metric_gate.limits.logical_date_problem`) before :func:`utc`,
    which overflows at the ends of the calendar.

    :param text: e.g. ``2026-03-01`` or ``2026-03-01T02:00:00+01:00``.
    :param what: the setting's name, for the message (``"--logical-date"``).
    :raises ValueError: ``text`` is not an ISO 8601 date or datetime; the message names ``what``.
    """
    try:
        return datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise ValueError(f"{what}: not an ISO 8601 date or datetime: {text!r}") from None
