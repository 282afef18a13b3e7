"""On-call's answer to a failing night or a level shift, asked through Airflow's human-in-the-loop.

The answer is carried out by the same code as the command line and the UI: accepting the new level
is :func:`airflow_metric_gate.accept.accept_level`, marking the night is the store's mark; the
approver's name and reason go into the run's provenance ``marks``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any

from airflow.providers.standard.operators.hitl import HITLOperator
from airflow.sdk import Param
from airflow.sdk.exceptions import AirflowFailException, AirflowSkipException

from airflow_metric_gate.accept import accept_level, accept_offer
from airflow_metric_gate.decision.policy import reports_only
from airflow_metric_gate.notification import build_notice
from airflow_metric_gate.operators.base import MetricGateBaseOperator
from airflow_metric_gate.operators.links import metric_gate_tab_url

if TYPE_CHECKING:
    from airflow.sdk import Context

#: The three answers, as the Airflow UI shows them.
ACCEPT = "Accept the new level"
TRUST = "Mark the night trusted"
KEEP = "Keep the night untrusted"
OPTIONS = (ACCEPT, TRUST, KEEP)


def needs_approval(verdict: Mapping | None) -> bool:
    """Whether a night asks on-call for an answer: a baseline night not trusted, or a level shift reported.

    :param verdict: the evaluate task's verdict.
    """
    if not isinstance(verdict, Mapping) or reports_only(verdict):
        return False
    return not verdict.get("trusted", True) or accept_offer(verdict) is not None


def responder(event: Mapping) -> str:
    """The name of who answered (their id when they have no name).

    :param event: the human-in-the-loop event (``responded_by_user``: ``{"id", "name"}``).
    """
    user = event.get("responded_by_user") or {}
    return str(user.get("name") or user.get("id") or "unknown")


class ApproveNightOperator(HITLOperator, MetricGateBaseOperator):
    """Ask on-call what to do with a failing night or a level shift, then do it.

    Runs after the evaluate task whatever its outcome (``trigger_rule="all_done"``; the
    ``metric_gate`` task group's ``approval=True`` wires it), reads its verdict and:

    * skips when there is nothing to answer (a trusted night without a level shift, a shadow run,
      no verdict);
    * otherwise waits for an answer in the Airflow UI's "Required actions" (or the REST API), with
      the night's summary as the question's body and a required ``reason``:

      - "Accept the new level": :func:`~airflow_metric_gate.accept.accept_level` from the level
        shift's first night (tonight when none is reported), by the approver, with the reason;
      - "Mark the night trusted": the night is marked trusted by the approver;
      - "Keep the night untrusted": the night stays untrusted, the approver's reason is recorded,
        and this task fails so the DAG run stays failed.

    :param evaluate_task_id: the evaluate task whose verdict is answered (templated).
    :param conn_id: the metric store's connection (templated).
    :param kwargs: passed to :class:`~airflow.providers.standard.operators.hitl.HITLOperator`
        (``response_timeout``, ``notifiers``, ``assigned_users``, ...) and the base operator.
    """

    template_fields: Sequence[str] = ("subject", "body", "evaluate_task_id", "conn_id")
    ui_color = "#fdf3d8"

    def __init__(self, *, evaluate_task_id: str, conn_id: str | None = None, **kwargs: Any) -> None:
        kwargs.setdefault("subject", "Metric gate: accept, trust or keep untrusted?")
        kwargs.setdefault("trigger_rule", "all_done")
        kwargs.pop("params", None)  # the DAG's params arrive here too; the form asks only for the reason
        params = {}
        # null until answered: a task's params are validated when it starts, before anyone answered
        params["reason"] = Param(None, type=["null", "string"], minLength=3, maxLength=500,
                                 description="Why: kept with the mark in the run's provenance")
        super().__init__(
            options=list(OPTIONS),
            params=params,
            conn_id=conn_id,
            **kwargs,
        )
        self.evaluate_task_id = evaluate_task_id

    def _verdict(self, context: Context) -> Mapping | None:
        ti = context["ti"]
        map_index = getattr(ti, "map_index", -1)
        verdict = ti.xcom_pull(task_ids=self.evaluate_task_id, key="return_value",
                               map_indexes=map_index if map_index is not None else -1)
        return verdict if isinstance(verdict, Mapping) else None

    def execute(self, context: Context) -> Any:
        """Skip when nothing needs an answer; else ask (the task waits for the answer).

        :param context: the task context.
        """
        verdict = self._verdict(context)
        if verdict is None:
            raise AirflowSkipException(f"no verdict from {self.evaluate_task_id}: nothing to approve")
        if not needs_approval(verdict):
            raise AirflowSkipException("the night is trusted and reports no level shift: nothing to approve")
        ti = context["ti"]
        notice = build_notice(
            verdict, dag_id=ti.dag_id, task_id=self.evaluate_task_id, run_id=ti.run_id,
            link=metric_gate_tab_url(ti.dag_id, ti.run_id, self.evaluate_task_id, getattr(ti, "map_index", -1)),
            failed=not verdict.get("trusted", True) and bool(verdict.get("blocking")),
        )
        self.subject = notice.subject
        self.body = "\n".join(f"- {line}" for line in notice.lines)
        return super().execute(context)

    def execute_complete(self, context: Context, event: dict[str, Any]) -> Any:
        """Carry out the answer through the store (the same actions as the command line and the UI).

        :param context: the task context.
        :param event: the answer (chosen option, ``reason``, who answered and when).
        """
        answer = super().execute_complete(context, event)
        verdict = self._verdict(context)
        if verdict is None:
            raise AirflowFailException(f"{self.task_id}: the verdict of {self.evaluate_task_id} is gone")
        (choice,) = answer["chosen_options"]
        reason = str((answer.get("params_input") or {}).get("reason") or "").strip()
        if len(reason) < 3:
            raise AirflowFailException(f"{self.task_id}: the answer needs a reason (3 characters or more)")
        by = responder(answer)
        run_id = verdict["run_id"]
        with self.store() as store:
            if choice == ACCEPT:
                offer = accept_offer(verdict)  # the level shift's (drift's, shape's) first night, else tonight
                since = offer[0] if offer is not None else run_id
                done = accept_level(store, verdict["series"], verdict["backend"], verdict["suite"], since=since,
                                    reason=reason, by=by)
                self.log.info("metric-gate: %s accepted the level of %s since %s (%s night(s)): %s", by,
                              verdict["series"], done["since"], done["nights"], reason)
                return {"answer": choice, "by": by, "reason": reason, **done}
            status = "trusted" if choice == TRUST else "untrusted"
            store.mark_runs(status, by="run_id", key=run_id, reason=f"{choice.lower()} by {by}: {reason}",
                            marked_by=by)
        self.log.info("metric-gate: %s: %s (store run %s): %s", by, choice, run_id, reason)
        if choice == KEEP:
            raise AirflowFailException(
                f"{self.task_id}: {by} kept night {verdict['logical_date']} of {verdict['series']} untrusted: {reason}"
            )
        return {"answer": choice, "by": by, "reason": reason, "run_id": run_id, "at": datetime.now(timezone.utc)
                .isoformat()}


__all__ = ["ACCEPT", "KEEP", "OPTIONS", "TRUST", "ApproveNightOperator", "needs_approval", "responder"]
