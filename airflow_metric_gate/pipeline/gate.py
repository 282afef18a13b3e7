"""The four stages in one process: what ``metric-gate run`` and the Python API's ``run_gate`` do."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from airflow_metric_gate.declarations import GateDeclaration
from airflow_metric_gate.pipeline.backfill import wait_for_earlier_runs
from airflow_metric_gate.pipeline.evaluating import empty_verdict, evaluate
from airflow_metric_gate.pipeline.identity import RunInfo, SeriesIdentity
from airflow_metric_gate.pipeline.options import EvaluateOptions, evaluate_options
from airflow_metric_gate.pipeline.persisting import check_run, persist
from airflow_metric_gate.pipeline.selecting import record_warnings
from airflow_metric_gate.records import Record, read_record
from airflow_metric_gate.selection import select_steps
from airflow_metric_gate.store import MetricStore


def run_gate(
    store: MetricStore,
    *,
    record: Any,
    declarations: Sequence[GateDeclaration],
    identity: SeriesIdentity,
    run: RunInfo,
    format: str = "series",
    wait: float = 0.0,
    on_skipped: Callable[[list[tuple[str, str]]], None] | None = None,
    on_stored: Callable[[str], None] | None = None,
    options: EvaluateOptions | None = None,
    **evaluate_kwargs: Any,
) -> dict:
    """Run all four stages in one process (what ``metric-gate run`` does).

    Bad input (record, declarations, keys, steps, dates, options) raises before anything is written.
    The run is judged only once no earlier night of its history window is pending (see
    :func:`~airflow_metric_gate.pipeline.wait_for_earlier_runs`); if some still are after ``wait``
    seconds, the run stays stored as ``pending`` and
    :class:`~airflow_metric_gate.pipeline.EarlierRunsPending` is raised (running again with the same
    run id judges it).

    :param store: the metric store.
    :param record: the record location, or the record already read
        (:func:`~airflow_metric_gate.records.read_record`).
    :param declarations: the resolved declarations.
    :param identity: the series identity.
    :param run: the run being gated.
    :param format: the record format.
    :param wait: seconds to wait for earlier pending nights to be judged (0: check once).
    :param on_skipped: called with the entries of a record directory that were skipped, as
        ``(path, reason)`` pairs, when there are any.
    :param on_stored: called with the run id once the run is stored (still ``pending``).
    :param options: how the run is judged (:class:`~airflow_metric_gate.pipeline.EvaluateOptions`);
        or give them as ``evaluate_kwargs``.
    :param evaluate_kwargs: the fields of :class:`~airflow_metric_gate.pipeline.EvaluateOptions` one
        by one, instead of ``options``.
    :raises TypeError: a keyword is no option, or both ``options`` and keywords were given.

    See also :func:`~airflow_metric_gate.pipeline.evaluate` and the Python API's
    :func:`~airflow_metric_gate.api.run_gate`.
    """
    given = evaluate_options(options, evaluate_kwargs, caller="run_gate")
    given.check()
    check_run(identity, run)
    if not isinstance(record, Record):
        record = read_record(record, format=format)
    if record.skipped and on_skipped is not None:
        on_skipped(record.skipped)
    selections = select_steps(record, declarations)
    if not selections:
        return empty_verdict(identity, run, enforce=bool(given.enforce))
    stored = persist(store, identity, run, selections, warnings=record_warnings(record, declarations),
                     chunk=given.chunk)
    if on_stored is not None:
        on_stored(run.run_id)
    wait_for_earlier_runs(store, run.run_id, history_limit=given.history_limit, timeout=wait)
    return evaluate(store, run.run_id, options=given, write_version=stored["write_version"])
