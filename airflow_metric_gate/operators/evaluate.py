"""Judge a stored run against the history of each coordinate, report, and enforce."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any

from airflow.sdk import BaseOperator
from airflow.sdk.exceptions import AirflowFailException

from airflow_metric_gate.evaluation import AGGREGATES, DEFAULT_HISTORY_LIMIT, DEFAULT_MIN_HISTORY, ERROR, FAIL
from airflow_metric_gate.operators._shared import (
    open_metric_store,
    optional,
    resolve_conn_id,
    store_errors,
    upstream_value,
)
from airflow_metric_gate.pipeline import RunInfo, SeriesIdentity, empty_verdict, evaluate
from airflow_metric_gate.printable import printable
from airflow_metric_gate.verdict import (
    DEFAULT_MAX_RESULTS,
    DEFAULT_TABLE_ROWS,
    XCOM_MAX_BYTES,
    render_report,
    show_command,
)

if TYPE_CHECKING:
    from airflow.sdk import Context

#: How many failing coordinates the task's failure message spells out (the verdict has them all).
MESSAGE_RESULTS = 3


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


class EvaluateGateOperator(BaseOperator):
    """Compare a stored run with its history, record the verdict, then pass or fail the task.

    Order matters for on-call: the versioned verdict (status, counts, a summary per failing
    declaration, the failing and erroring coordinates worst first with their explanations;
    truncated with a count so it stays below 64 KiB) is pushed to XCom first, then the task logs
    one summary line per failing declaration, one greppable line::

        metric-gate: <series> run <id>: TRUSTED|NOT-TRUSTED (<n> results, <f> fail, <e> error)

    the table of the worst ``table_rows`` coordinates of each declaration, and where the full
    verdict is; and only then, when an enforced FAIL or ERROR is present (``enforce=True``, or a
    declaration's own ``enforce``, unless allowlisted), raises ``AirflowFailException`` (no retries) naming what
    failed and where the full verdict is.  A shadow run (manual runs by default, ``airflow dags test``
    included) is reported and never fails the task; its log says so in one line before everything
    else, with how to make the run a baseline run.  Store outages raise a retryable error.

    :param run: what :class:`PersistValuesOperator` returned, or a store run id; ``None`` takes it
        from the only upstream task's XCom (templated).
    :param conn_id: the Airflow connection of the metric store (type ``postgres``); ``None`` uses
        the ``[metric_gate] conn_id`` option, default ``metric_gate_db`` (templated).
    :param enforce: fail the task on any FAIL or ERROR of a baseline run.
    :param history_limit: how many earlier trusted baseline runs form each baseline.
    :param min_history: with fewer baseline values a coordinate is INACTIVE (cold start).
    :param aggregate: the baseline reference, ``mean`` or ``median``.
    :param all_results: list every result in the verdict, not only FAIL and ERROR.
    :param max_results: at most this many results in the verdict (the rest are counted).
    :param table_rows: at most this many rows per declaration in the logged table, worst first
        (``None`` or 0: no limit); the verdict is not affected.
    :param kwargs: passed to :class:`~airflow.sdk.BaseOperator`.
    """

    template_fields: Sequence[str] = ("run", "conn_id")
    ui_color = "#f0e0dc"

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
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.run = run
        self.conn_id = conn_id
        self.enforce = enforce
        self.history_limit = history_limit
        self.min_history = min_history
        self.aggregate = aggregate
        self.all_results = all_results
        self.max_results = max_results
        self.table_rows = table_rows

    def _verdict(self, run: Mapping[str, Any] | str) -> dict[str, Any]:
        if isinstance(run, Mapping) and run.get("declarations") == 0:
            identity = SeriesIdentity(run["series"], run["backend"], run["suite"])
            info = RunInfo(run["run_id"], run["role"], datetime.fromisoformat(run["logical_date"]))
            return empty_verdict(identity, info, enforce=bool(self.enforce))
        run_id = run.get("run_id") if isinstance(run, Mapping) else optional(run)
        if not isinstance(run_id, str):
            raise AirflowFailException(f"{self.task_id}: run must be a store run id or PersistValuesOperator's output")
        if self.aggregate not in AGGREGATES:
            raise AirflowFailException(f"aggregate must be one of {', '.join(AGGREGATES)}, got {self.aggregate!r}")
        with store_errors(self.task_id):
            with open_metric_store(resolve_conn_id(self.conn_id)) as store:
                return evaluate(
                    store,
                    run_id,
                    history_limit=self.history_limit,
                    min_history=self.min_history,
                    aggregate=self.aggregate,
                    enforce=bool(self.enforce),
                    all_results=self.all_results,
                    max_results=self.max_results,
                    max_bytes=XCOM_MAX_BYTES,
                )

    def execute(self, context: Context) -> None:
        """Evaluate, push the verdict to XCom (``return_value``), log it, then enforce.

        :param context: the task context.
        """
        run = self.run if self.run is not None else upstream_value(self, context, "run")
        verdict = self._verdict(run)
        ti = context["ti"]
        ti.xcom_push(key="return_value", value=verdict)

        shadow = verdict["role"] == "shadow"
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
        log("%s", summary)  # a log line of its own, to grep for
        self.log.info("Verdict:\n%s", report.table)
        for line in report.where:
            self.log.info("%s", line)

        if not verdict["blocking"]:
            return
        if verdict["role"] == "shadow":
            self.log.warning("Shadow run: %s enforced FAIL/ERROR result(s) reported, not enforced", verdict["blocking"])
            return
        enforced = [r for r in verdict["results"] if r["status"] in (FAIL, ERROR) and not r.get("allowlist_reason")]
        shown = [_describe(r) for r in enforced[:MESSAGE_RESULTS]]
        more = verdict["blocking"] - len(shown)
        raise AirflowFailException(
            f"{summary}: {verdict['blocking']} enforced FAIL/ERROR result(s): "
            + "; ".join(shown)
            + (f"; and {more} more" if more > 0 else "")
            + f". Full verdict: {_xcom_location(ti)}"
            + f"; store run {verdict['run_id']}."
        )
