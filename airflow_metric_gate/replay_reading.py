"""What both replays share: their checked settings, the series' nights as the store holds them, nights by
logical date, and the routing of a given declaration to the stored coordinates it is judged on.

:mod:`airflow_metric_gate.replay` (reference declarations only) and
:mod:`airflow_metric_gate.replay_calibrated` (any calibrated declaration) judge nights their own way;
everything else a replay reads or refuses is here, once.
"""

from __future__ import annotations

import shlex
from collections.abc import Callable, Collection, Iterable, Iterator, Sequence
from typing import Any, TypeVar

from airflow_metric_gate.declarations import GateDeclaration, collapse_duplicates
from airflow_metric_gate.pipeline import check_evaluate_options
from airflow_metric_gate.store import MetricStore, RunRow, StoreInputError, StoreUnavailable

TRUST_MODES = ("replayed", "stored")

#: A stored coordinate or declaration: (metric_key, steps_key, constraint_key).
Key = tuple[str, str, str]

_T = TypeVar("_T")


def checked_declarations(declarations: Sequence[GateDeclaration] | None, *, history_limit: int, min_history: int,
                         aggregate: str, trust: str) -> tuple[Sequence[GateDeclaration] | None, list[str]]:
    """Refuse bad replay settings; return the given declarations, one per coordinate, and the warnings.

    :param declarations: the given declarations, or ``None`` (the stored ones).
    :param history_limit: how many earlier trusted baseline runs form a baseline.
    :param min_history: fewer baseline values make a coordinate INACTIVE.
    :param aggregate: ``mean`` or ``median``.
    :param trust: one of :data:`TRUST_MODES`.
    :raises StoreInputError: a setting is out of range.
    :raises DeclarationError: two declarations of one coordinate differ.
    """
    check_evaluate_options(history_limit=history_limit, min_history=min_history, aggregate=aggregate)
    warnings: list[str] = []
    if declarations is not None:
        declarations, warnings = collapse_duplicates(declarations)
    if trust not in TRUST_MODES:
        raise StoreInputError(f"trust must be one of {', '.join(TRUST_MODES)}, got {trust!r}")
    return declarations, warnings


def series_nights(store: MetricStore, series: str, backend: str, suite: str) -> list[tuple[RunRow, list]]:
    """Return the runs of a series identity with the blocks of their values, oldest first.

    :param store: the open store.
    :param series: the series name.
    :param backend: the backend.
    :param suite: the suite.
    :raises StoreInputError: the store has no run of the series identity (the message names where the
        series is stored, if anywhere).
    """
    runs_and_blocks = store.series_runs_and_blocks(series, backend, suite)
    if runs_and_blocks:
        return runs_and_blocks
    stored = sorted({(r.backend, r.suite) for r in store.list_runs(series=series, limit=1000)})
    places = [f"--backend {shlex.quote(b)} --suite {shlex.quote(s)}" for b, s in stored[:5]]
    where = ("; it is stored under " + ", ".join(places)
             + (f" and {len(stored) - 5} more" if len(stored) > 5 else "")) if stored else ""
    raise StoreInputError(
        f"the metric store has no run of series {series!r} (backend {backend!r}, suite {suite!r}); "
        f"nothing to replay{where}"
    )


def changed_while_read(series: str) -> StoreUnavailable:
    """The error of a replay whose two reads of the store disagree.

    :param series: the series name.
    """
    return StoreUnavailable(
        f"the stored nights of series {series!r} changed while replay read them (a night was written "
        "meanwhile); nothing is reported: run replay again"
    )


def by_logical_date(nights: Sequence[_T], date_of: Callable[[_T], Any]) -> Iterator[Sequence[_T]]:
    """Yield the consecutive nights of one logical date at a time (they do not see each other).

    :param nights: nights in logical-date order.
    :param date_of: a night's logical date.
    """
    start = 0
    for i in range(1, len(nights) + 1):
        if i == len(nights) or date_of(nights[i]) != date_of(nights[start]):
            yield nights[start:i]
            start = i


def routes(keys: Iterable[Key]) -> dict[tuple[str, str], list[Key]]:
    """Route given declarations to stored coordinates: by metric and steps literal, whatever the constraint.

    :param keys: the given declarations' keys.
    :return: ``(metric_key, steps_key)`` -> the keys judged on the stored coordinates of that literal.
    """
    out: dict[tuple[str, str], list[Key]] = {}
    for key in keys:
        out.setdefault(key[:2], []).append(key)
    return out


def same_literal(key: Key, stored: Collection[Key]) -> Key | None:
    """Return the stored coordinate a declaration is judged on: its own, else the first of its metric and steps literal.

    :param key: the declaration's key.
    :param stored: the stored coordinates of a night (values or selection errors), in stored order.
    """
    if key in stored:
        return key
    return next((k for k in stored if k[:2] == key[:2]), None)
