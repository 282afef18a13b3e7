"""Accepting a new level: the one action that ends a level shift (the command line, the UI and Python call it).

A level shift (``level_shifts`` in the verdict of the calibrated policy) that on-call judges right
is accepted from its first night on: a rebaseline marker is set on that night, and every judged
baseline night from then on is marked trusted with the reason.  Later nights are judged against
those nights, several of them, never against one night alone.  Under the reference policy the
same action is a rebaseline that keeps the nights since.
"""

from __future__ import annotations

import getpass
import os
from collections.abc import Mapping
from typing import Any

from airflow_metric_gate.store import MetricStore, opened_store

__all__ = ["accept_level", "accept_offer", "current_user"]


def current_user() -> str:
    """Return who runs this process, for the marks it makes (``$METRIC_GATE_USER`` wins)."""
    name = os.environ.get("METRIC_GATE_USER")
    if name:
        return name
    try:
        return getpass.getuser()
    except (KeyError, OSError):  # no name for this uid (a container)
        return "unknown"


def accept_offer(verdict: Any) -> tuple[str, str] | None:
    """The change a verdict offers to accept, as (its first night's store run id, a short description).

    A level shift not adopted yet first, then a night that got worse within itself, then a slow
    drift: each is accepted as a new level from the night it was first reported.  ``None`` when the
    verdict reports none of them (a reference verdict, a verdict of an earlier release without the
    night).  The UI's button and the approval operator's answer both accept what this names.

    :param verdict: a verdict (SPEC 10 with the calibrated sections), or whatever an XCom held.
    """
    if not isinstance(verdict, Mapping):
        return None
    for section in ("level_shifts", "within_night", "drifts"):
        for change in verdict.get(section) or ():
            if isinstance(change, Mapping) and not change.get("adopted") and change.get("since_run_id"):
                return str(change["since_run_id"]), _offer_text(section, change)
    return None


def _offer_text(section: str, change: Mapping[str, Any]) -> str:
    """What the accept button says of a change of a verdict's ``section``."""
    since = str(change.get("since") or change.get("start"))[:10]
    if section == "within_night":
        return f"worse from step {change.get('from_step')} since {since}"
    size = change.get("change" if section == "level_shifts" else "cumulative")
    pct = f"{size * 100:+.1f} %" if isinstance(size, (int, float)) else ""
    if section == "level_shifts":
        return f"{pct} since {since}" if pct else ""
    return f"drift {pct}, reported since {since}"


def accept_level(store: str | MetricStore | None, series: str, backend: str = "cuda", suite: str = "default", *,
                 since: str, reason: str, by: str | None = None) -> dict[str, Any]:
    """Accept a series' level from a night on (atomic and idempotent).

    :param store: a store URL, an open store (left open), or ``None`` for ``$METRIC_GATE_STORE``.
    :param series: the series name.
    :param backend: the backend.
    :param suite: the suite.
    :param since: the first night of the new level: its store run id or its logical date (ISO 8601).
    :param reason: why the new level is right.
    :param by: who accepts (default: :func:`current_user`).
    :return: ``{"since", "since_run_id", "nights", "marked"}``.
    :raises StoreInputError: no reason, or no judged baseline night at or after ``since``.
    """
    with opened_store(store) as opened:
        return opened.accept_level(series, backend, suite, since=since, reason=reason, by=by or current_user())
