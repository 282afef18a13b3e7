"""Judge a stored run against the history of each coordinate, report, and enforce."""

from __future__ import annotations

import importlib.util
import math
from collections.abc import Mapping, Sequence
from datetime import datetime, timedelta, timezone
from typing import TYPE_CHECKING, Any

from airflow.providers.standard.triggers.temporal import TimeDeltaTrigger
from airflow.sdk.exceptions import AirflowException, AirflowFailException

from airflow_metric_gate.decision.policy import blocking_results, reports_only
from airflow_metric_gate.enums import Aggregate
from airflow_metric_gate.evaluation import DEFAULT_HISTORY_LIMIT, DEFAULT_MIN_HISTORY
from airflow_metric_gate.operators._shared import optional, upstream_value
from airflow_metric_gate.operators.base import MetricGateBaseOperator
from airflow_metric_gate.operators.links import MetricGateTabLink
from airflow_metric_gate.pipeline import (
    EvaluateOptions,
    RunInfo,
    SeriesIdentity,
    describe_runs,
    empty_verdict,
    evaluate,
)
from airflow_metric_gate.printable import printable
from airflow_metric_gate.report import DEFAULT_TABLE_ROWS, render_report, show_command
from airflow_metric_gate.store.urls import scrub
from airflow_metric_gate.verdict import DEFAULT_MAX_RESULTS, XCOM_MAX_BYTES, for_xcom

if TYPE_CHECKING:
    from airflow.sdk import Context

#: How many failing coordinates the task's failure message spells out (the verdict has them all).
MESSAGE_RESULTS = 3
#: How long a night waits for earlier nights of its history window to be judged (a backfill).
DEFAULT_WAIT_TIMEOUT = timedelta(hours=6)
#: Seconds between two checks while waiting (the task is deferred in between: no worker slot held).
DEFAULT_POLL_INTERVAL = 15.0


#: The line a shadow run's log starts with, before the verdict table.
SHADOW_NOTE = (
    "Shadow run: reported only, it neither fails this task nor builds history (a shadow run never feeds "
    "the baseline of later nights; manual runs, `airflow dags test` included, are shadow). To make it a "
    "baseline run, set the role param to baseline (role='baseline' on PersistValuesOperator) with the "
    "night param or a logical date, or let the night run as a scheduled or backfill run."
)


def _describe(result: Mapping[str, Any]) -> str:
    where = result["metric_key"]
    if result.get("step") is not None:
        where += f" step {result['step']}" if result["step"] != -1 else " (last)"
    return printable(f"{result['status']} {where}: {result.get('reason') or ''}".rstrip(": "))


def _xcom_location(ti: Any) -> str:
    map_index = getattr(ti, "map_index", -1)
    return f"XCom return_value of task {ti.task_id} in DAG run {ti.run_id}" + (
        f" (map index {map_index})" if map_index not in (None, -1) else ""
    )


class EvaluateGateOperator(MetricGateBaseOperator):
    """Compare a stored run with its history, record the verdict, then pass or fail the task.

    Order matters for on-call: the versioned verdict (status, counts, a summary per failing
    declaration, the failing and erroring coordinates worst first with their explanations;
    truncated with a count so it stays below 64 KiB) is pushed to XCom first, then the task logs
    one summary line per failing declaration, one greppable line::

        metric-gate: <series> run <id>: TRUSTED|NOT-TRUSTED (<n> results, <f> fail, <e> error)

    the table of the worst ``table_rows`` coordinates of each declaration, and where the full
    verdict is; and only then, when an enforced FAIL or ERROR is present (``enforce=True``, or a
    declaration's own ``enforce``, unless allowlisted or of ``severity: warn``), raises
    ``AirflowFailException`` (no retries) naming what failed and where the full verdict is.  A shadow
    run (manual runs by default, ``airflow dags test`` included) is reported and never fails the
    task; its log says so in one line before everything else, with how to make the run a baseline
    run.  Store outages raise a retryable error.

    The task has the extra link "Metric gate" (its verdict in the UI), and reports OpenLineage
    facets when the OpenLineage provider is installed (extra ``openlineage``): the store's
    ``metric_values`` table as its output dataset, with a ``dataQualityAssertions`` facet holding
    one assertion per declaration, on completion and on failure alike.

    A night is judged only once no earlier night of its history window is still ``pending`` (an
    Airflow backfill runs many nights at once), nor an earlier DAG run of the same DAG that could
    still add one is running.  Until then the task defers (``TimeDeltaTrigger``: no worker slot is
    held) and checks again every ``poll_interval`` seconds; after ``wait_timeout`` it fails with a
    retryable error naming the nights it waited for.

    :param run: what :class:`PersistValuesOperator` returned, or a store run id; ``None`` takes it
        from the only upstream task's XCom (templated).
    :param conn_id: the Airflow connection of the metric store (type ``metric_gate`` or
        ``postgres``, see :class:`~airflow_metric_gate.hooks.metric_store.MetricStoreHook`); ``None``
        uses the ``[metric_gate] conn_id`` option, default ``metric_gate_db`` (templated).
    :param enforce: fail the task on any FAIL or ERROR of a baseline run.
    :param history_limit: how many earlier trusted baseline runs form each baseline.
    :param min_history: with fewer baseline values a coordinate is INACTIVE (cold start).
    :param aggregate: the baseline reference, ``mean`` or ``median``.
    :param all_results: list every result in the verdict, not only FAIL and ERROR.
    :param max_results: at most this many results in the verdict (the rest are counted).
    :param table_rows: at most this many rows per declaration in the logged table, worst first
        (``None`` or 0: no limit); the verdict is not affected.
    :param wait_timeout: how long to wait for earlier nights to be judged: a ``timedelta`` or seconds
        (default 6 hours; templated).
    :param poll_interval: seconds between two checks while waiting (default 15).
    :param kwargs: passed to :class:`~airflow.sdk.BaseOperator`.
    """

    template_fields: Sequence[str] = ("run", "conn_id", "wait_timeout")
    ui_color = "#f0e0dc"
    operator_extra_links = (MetricGateTabLink(),)

    def __init__(
        self,
        *,
        run: Mapping[str, Any] | str | None = None,
        conn_id: str | None = None,
        enforce: bool = False,
        history_limit: int = DEFAULT_HISTORY_LIMIT,
        min_history: int = DEFAULT_MIN_HISTORY,
        aggregate: str = "mean",
        all_results: bool = False,
        max_results: int = DEFAULT_MAX_RESULTS,
        table_rows: int | None = DEFAULT_TABLE_ROWS,
        wait_timeout: timedelta | float | str = DEFAULT_WAIT_TIMEOUT,
        poll_interval: float = DEFAULT_POLL_INTERVAL,
        **kwargs: Any,
    ) -> None:
        super().__init__(conn_id=conn_id, **kwargs)
        self.run = run
        self.enforce = enforce
        self.history_limit = history_limit
        self.min_history = min_history
        self.aggregate = aggregate
        self.all_results = all_results
        self.max_results = max_results
        self.table_rows = table_rows
        self.wait_timeout = wait_timeout
        self.poll_interval = poll_interval

    # -- waiting for earlier nights (a backfill runs many at once) ------------------------------

    def _timeout_seconds(self) -> float:
        value = self.wait_timeout
        try:
            seconds = value.total_seconds() if isinstance(value, timedelta) else float(value)
        except (TypeError, ValueError):
            seconds = math.nan
        if not 0 <= seconds < math.inf:
            raise self.bad_input(f"wait_timeout must be a timedelta or a number of seconds >= 0, got {value!r}")
        return seconds

    def _earlier_dag_run(self, context: Context, window: Any) -> str | None:
        """Describe the latest earlier DAG run of this DAG still running, when it could add to the window.

        A backfill creates all its DAG runs up front: an earlier night may not be stored yet.
        """
        get_previous = getattr(context["ti"], "get_previous_dagrun", None)
        dag_run = context.get("dag_run")
        if get_previous is None or getattr(dag_run, "logical_date", None) is None:
            return None  # no logical date: no earlier runs to order by
        try:
            earlier = get_previous(state="running")
        except Exception as err:  # an API server that cannot answer: judge by the store alone
            self.log.warning("Cannot look up earlier running DAG runs (%s); judging by the store alone", err)
            return None
        when = getattr(earlier, "logical_date", None)
        if earlier is None or when is None:
            return None
        if (window.full and when < window.oldest) or (window.since is not None and when < window.since):
            return None  # its night could not enter the window
        if any(r.airflow_run_id == earlier.run_id and r.status != "pending" for r in window.runs):
            return None  # its night of this series is stored and judged already
        return f"DAG run {earlier.run_id} (logical date {when.isoformat()}) of this DAG, still running"

    def _wait_for_earlier_nights(self, context: Context, run: Any, waiting_since: str | None) -> None:
        """Return when the run can be judged; else defer (or fail once ``wait_timeout`` has passed)."""
        if isinstance(run, Mapping) and run.get("declarations") == 0:
            return  # nothing stored, nothing to judge
        run_id = run.get("run_id") if isinstance(run, Mapping) else optional(run)
        if not isinstance(run_id, str):
            return  # _verdict says what is wrong
        timeout = self._timeout_seconds()
        now = datetime.now(timezone.utc)
        since = datetime.fromisoformat(waiting_since) if waiting_since else now
        with self.store() as store:
            window = store.history_window(run_id, self.history_limit)
        if not window.found:
            return  # _verdict says the store has no such run
        waiting_for = []
        if window.pending:
            waiting_for.append(f"earlier night(s) stored but not judged yet: {describe_runs(window.pending)}")
        dag_run = self._earlier_dag_run(context, window)
        if dag_run:
            waiting_for.append(dag_run)
        waited = (now - since).total_seconds()
        if not waiting_for:
            if waiting_since:
                self.log.info("Earlier nights judged after waiting %.0f s; judging store run %s", waited, run_id)
            return
        if waited >= timeout:
            raise AirflowException(
                f"{self.task_id}: store run {run_id} not judged after waiting {waited:.0f} s "
                f"(wait_timeout {timeout:g} s), so that it is not judged against too little history; waiting for "
                + "; ".join(waiting_for)
                + ". Let those nights finish (or clear their evaluate task); a night that will never be judged "
                "can be marked: metric-gate mark-untrusted --run-id <store run id>. Retrying waits again."
            )
        delay = max(1.0, min(float(self.poll_interval), timeout - waited))
        self.log.info("Store run %s waits (%.0f s so far), checking again in %.0f s: %s",
                      run_id, waited, delay, "; ".join(waiting_for))
        self.defer(
            trigger=TimeDeltaTrigger(timedelta(seconds=delay)),
            method_name="resume",
            kwargs={"waiting_since": since.isoformat()},
        )

    def resume(self, context: Context, event: Any = None, waiting_since: str | None = None) -> None:
        """Check again after a wait, then judge (or wait again).

        :param context: the task context.
        :param event: the trigger's event (unused: the store is read again).
        :param waiting_since: when the first check found earlier nights pending (ISO 8601).
        """
        self.execute(context, waiting_since=waiting_since)

    def _verdict(self, run: Mapping[str, Any] | str) -> dict[str, Any]:
        if isinstance(run, Mapping) and run.get("declarations") == 0:
            identity = SeriesIdentity(run["series"], run["backend"], run["suite"])
            info = RunInfo(run["run_id"], run["role"], datetime.fromisoformat(run["logical_date"]))
            return empty_verdict(identity, info, enforce=bool(self.enforce))
        run_id = run.get("run_id") if isinstance(run, Mapping) else optional(run)
        if not isinstance(run_id, str):
            raise self.bad_input("run must be a store run id or PersistValuesOperator's output")
        problem = Aggregate.problem(self.aggregate, "aggregate")
        if problem:
            raise self.bad_input(problem)
        with self.store() as store:
            options = EvaluateOptions(
                history_limit=self.history_limit,
                min_history=self.min_history,
                aggregate=self.aggregate,
                enforce=bool(self.enforce),
                all_results=self.all_results,
                max_results=self.max_results,
                max_bytes=XCOM_MAX_BYTES,
            )
            return evaluate(store, run_id, options=options)

    def execute(self, context: Context, waiting_since: str | None = None) -> None:
        """Evaluate, push the verdict to XCom (``return_value``), log it, then enforce.

        :param context: the task context.
        :param waiting_since: set on resume: when the wait for earlier nights began.
        """
        run = self.run if self.run is not None else upstream_value(self, context, "run")
        self._wait_for_earlier_nights(context, run, waiting_since)
        verdict = self._verdict(run)
        ti = context["ti"]
        ti.xcom_push(key="return_value", value=for_xcom(verdict))
        self._remember_lineage(verdict)

        shadow = reports_only(verdict)
        if shadow:
            self.log.info("%s", SHADOW_NOTE)
        report = render_report(
            verdict,
            table_rows=self.table_rows,
            fails=not shadow,
            where=(f"Full verdict: {_xcom_location(ti)}", f"Every result: {show_command(verdict)}"),
        )
        summary = report.grep_line
        log = self.log.info if verdict["trusted"] else self.log.warning
        for line in report.summary:  # first: what regressed, one line per failing declaration
            log("%s", line)
        for line in report.warnings:  # then what the record lost: points dropped, lines no gate reads
            self.log.warning("%s", line)
        log("%s", summary)  # a log line of its own, to grep for
        self.log.info("Verdict:\n%s", report.table)
        for line in report.where:
            self.log.info("%s", line)

        if not verdict["blocking"]:
            return
        if shadow:
            self.log.warning("Shadow run: %s enforced FAIL/ERROR result(s) reported, not enforced", verdict["blocking"])
            return
        enforced = blocking_results(verdict)
        shown = [_describe(r) for r in enforced[:MESSAGE_RESULTS]]
        more = verdict["blocking"] - len(shown)
        raise AirflowFailException(
            f"{summary}: {verdict['blocking']} enforced FAIL/ERROR result(s): "
            + "; ".join(shown)
            + (f"; and {more} more" if more > 0 else "")
            + f". Full verdict: {_xcom_location(ti)}"
            + f"; store run {verdict['run_id']}."
        )

    # -- OpenLineage (called by the provider's listener after execute, on success or failure) --------

    def _remember_lineage(self, verdict: Mapping[str, Any]) -> None:
        """Gather what the lineage facets need while the task runs (the provider's listener may run in a
        forked process that must not reach the store, a connection or XCom); only with the provider installed."""
        if importlib.util.find_spec("airflow.providers.openlineage") is None:
            return
        try:
            location = self.hook.store_location()
            declarations: list = []
            if verdict.get("run_id") and sum(verdict["counts"].values()):
                with self.hook.get_store() as store:
                    stored = store.get_run(verdict["run_id"])
                declarations = list(stored.declarations) if stored is not None else []
        except Exception as err:  # lineage never fails the task
            self.log.warning("metric-gate: no lineage for this night (%s)", scrub(str(err)))
            return
        self._lineage_input = (dict(verdict), declarations, location)

    def _lineage(self) -> Any:
        from airflow.providers.openlineage.extractors import OperatorLineage

        from airflow_metric_gate.operators.lineage import operator_lineage

        found = getattr(self, "_lineage_input", None)
        if found is None:  # failed before judging: nothing was asserted
            return OperatorLineage()
        return operator_lineage(*found)

    def get_openlineage_facets_on_complete(self, task_instance: Any) -> Any:
        """Return the lineage of a judged night: the store's values table and one assertion per declaration.

        :param task_instance: the task instance (unused: the facets were gathered while the task ran).
        """
        return self._lineage()

    def get_openlineage_facets_on_failure(self, task_instance: Any) -> Any:
        """Return the same lineage when the night failed the task (its assertions say which failed).

        :param task_instance: the task instance (unused).
        """
        return self._lineage()
