"""Persist, the gate's third stage: write a run (``pending``) and its selected values, atomically."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from airflow_metric_gate.limits import (
    MAX_CONSTRAINT_KEY_BYTES,
    MAX_METRIC_KEY_BYTES,
    MAX_NAME_BYTES,
    MAX_STEP,
    MAX_STEPS_KEY_BYTES,
    key_problem,
    logical_date_problem,
    step_problem,
)
from airflow_metric_gate.pipeline.identity import RunInfo, SeriesIdentity
from airflow_metric_gate.selection import LAST_STEP, Selection
from airflow_metric_gate.store import MetricStore, RunRow, StoreInputError
from airflow_metric_gate.store.points import PointGroup
from airflow_metric_gate.store.rows import PROVENANCE_COLUMNS


def check_run(identity: SeriesIdentity, run: RunInfo, selections: Sequence[Selection] = ()) -> None:
    """Check every key, step and date of a run against the limits (:mod:`~airflow_metric_gate.limits`).

    :param identity: the series identity.
    :param run: the run.
    :param selections: the selected values.
    :raises StoreInputError: naming the first value over a limit; nothing was written.
    """
    names = [("series", identity.series), ("backend", identity.backend), ("suite", identity.suite),
             ("run id", run.run_id)]
    names += [(k, run.provenance[k]) for k in PROVENANCE_COLUMNS if isinstance(run.provenance.get(k), str)]
    for what, value in names:
        problem = key_problem(value, MAX_NAME_BYTES)
        if problem:
            raise StoreInputError(f"{what} {value!r} {problem}; nothing was written")
    problem = logical_date_problem(run.logical_date)
    if problem:
        raise StoreInputError(f"{problem}; nothing was written")
    for s in selections:
        d = s.declaration
        for what, value, limit in (("metric_key", d.metric_key, MAX_METRIC_KEY_BYTES),
                                   ("steps_key", d.steps_key, MAX_STEPS_KEY_BYTES),
                                   ("constraint_key", d.constraint_key, MAX_CONSTRAINT_KEY_BYTES)):
            problem = key_problem(value, limit)
            if problem:
                raise StoreInputError(f"{what} {value[:80]!r} {problem}; nothing was written")
        for steps in (s.steps, s.at_steps):
            known = steps if None not in steps else [k for k in steps if k is not None]
            if known and (min(known) < LAST_STEP or max(known) > MAX_STEP):  # type: ignore[type-var,operator]  # no None
                bad = next(k for k in known if k != LAST_STEP and step_problem(k))
                raise StoreInputError(f"{d.metric_key!r}: step {step_problem(bad)}; nothing was written")


#: The provenance key under which a run keeps the warnings of its record
#: (:func:`~airflow_metric_gate.pipeline.selecting.record_warnings`).
WARNINGS_KEY = "record_warnings"


def persist(
    store: MetricStore,
    identity: SeriesIdentity,
    run: RunInfo,
    selections: Sequence[Selection],
    *,
    warnings: Sequence[Mapping[str, Any]] = (),
    chunk: int | None = None,
) -> dict:
    """Write a run (status ``pending``) and one row per selected (metric, step), atomically.

    Writing the same ``run.run_id`` again replaces that run's rows.

    :param store: the metric store.
    :param identity: the series identity.
    :param run: the run being gated.
    :param selections: from :func:`~airflow_metric_gate.selection.select_steps`.
    :param warnings: from :func:`~airflow_metric_gate.pipeline.selecting.record_warnings`: kept with
        the run (provenance key ``record_warnings``) for its verdict.
    :param chunk: values built and sent at a time (default
        :func:`~airflow_metric_gate.chunking.chunk_points`); the rows stored do not depend on it.
    :return: ``{"run_id", "rows", "errors", "declarations", "write_version"}`` (the write version
        names this write of the run id, see :meth:`MetricStore.write_night`); with no declarations
        nothing is stored (a run with no declarations is trusted and stores nothing).
    :raises StoreInputError: a key, step or date is over its limit (:func:`check_run`); nothing
        was written.
    """
    check_run(identity, run, selections)
    if not selections:
        return {"run_id": run.run_id, "rows": 0, "errors": 0, "declarations": 0}
    errors: list[dict] = []
    ordinal = 0
    for s in selections:
        d = s.declaration
        if s.error is not None:
            errors.append({"ordinal": ordinal, "metric_key": d.metric_key, "steps_key": d.steps_key,
                           "constraint_key": d.constraint_key, "message": s.error})
            ordinal += 1
            continue
        ordinal += len(s.values)

    # the selections' own lists, declaration by declaration: no object per value
    groups: list[PointGroup] = []
    ordinal = 0
    for s in selections:
        d = s.declaration
        if s.error is not None:
            ordinal += 1
            continue
        if s.steps:
            groups.append(PointGroup((d.metric_key, d.steps_key, d.constraint_key), ordinal, s.steps, s.values,
                                     s.at_steps))
        ordinal += len(s.steps)

    row = RunRow(
        run_id=run.run_id, series=identity.series, backend=identity.backend, suite=identity.suite,
        role=run.role, status="pending", logical_date=run.logical_date,
        provenance={**run.provenance, **({WARNINGS_KEY: [dict(w) for w in warnings]} if warnings else {})},
        declarations=[s.declaration.summary() for s in selections], selection_errors=errors,
    )
    written = store.write_columns(row, groups, chunk=chunk)
    return {"run_id": run.run_id, "rows": written.rows, "errors": len(errors), "declarations": len(selections),
            "write_version": written.write_version}

