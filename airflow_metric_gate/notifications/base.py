"""The notifier every variant shares: find the night's verdict, decide whether to speak, build the notice."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from airflow.sdk import BaseNotifier

from airflow_metric_gate.notification import Notice, build_notice, needs_attention
from airflow_metric_gate.operators.links import metric_gate_tab_url
from airflow_metric_gate.printable import printable
from airflow_metric_gate.store.urls import scrub

if TYPE_CHECKING:
    from airflow.sdk import Context

#: Airflow's default task owner: it names nobody, so a notice does not say it.
DEFAULT_OWNER = "airflow"


class MetricGateNotifier(BaseNotifier):
    """Tell on-call about a night of the gate: the verdict's summary and the link to its Metric gate tab.

    Called as a task callback of an ``EvaluateGateOperator`` task (``on_failure_callback`` and
    ``on_success_callback``; the ``metric_gate`` task group's ``notifiers`` sets both), it reads
    the verdict the task pushed before it failed (XCom ``return_value``) and sends
    :func:`~airflow_metric_gate.notification.build_notice`'s notice with :meth:`send`:

    * on failure, always: the "REGRESSED ..." lines, counts, level shifts and drift, who must act
      and what to do; or, when the task failed before a verdict, its error;
    * on success, only when the night deserves a warning
      (:func:`~airflow_metric_gate.notification.needs_attention`: a ``severity: warn`` result, a
      level shift, a drift, an untrusted night that is not enforced); a quiet night sends nothing.

    Subclasses implement :meth:`send`.

    :param on_call: who must act, named in the notice (a name, a handle, a list of them); default
        the evaluate task's owners.
    :param evaluate_task_id: the evaluate task whose verdict is told; default the task the callback
        belongs to.
    :param base_url: the Airflow UI's address for the link; default ``[api] base_url``.
    """

    template_fields: Sequence[str] = ("on_call",)

    def __init__(
        self,
        *,
        on_call: str | Sequence[str] | None = None,
        evaluate_task_id: str | None = None,
        base_url: str | None = None,
    ) -> None:
        super().__init__()
        self.on_call = on_call
        self.evaluate_task_id = evaluate_task_id
        self.base_url = base_url

    def _who(self, context: Context) -> list[str]:
        if self.on_call:
            return [self.on_call] if isinstance(self.on_call, str) else list(self.on_call)
        owner = getattr(context.get("task"), "owner", None) or ""
        return [o.strip() for o in str(owner).split(",") if o.strip() and o.strip() != DEFAULT_OWNER]

    def notice(self, context: Context) -> Notice | None:
        """Return the notice of this callback, or ``None`` when a night that passed has nothing to say.

        :param context: the task context the callback got.
        """
        ti = context["ti"]
        task_id = self.evaluate_task_id or ti.task_id
        map_index = getattr(ti, "map_index", -1)
        verdict = ti.xcom_pull(task_ids=task_id, key="return_value",
                               map_indexes=map_index if map_index is not None else -1)
        if not isinstance(verdict, Mapping):
            verdict = None
        error = context.get("exception")
        failed = error is not None
        if not failed and not needs_attention(verdict):
            return None
        link = metric_gate_tab_url(ti.dag_id, ti.run_id, task_id, map_index, base=self.base_url)
        return build_notice(
            verdict, dag_id=ti.dag_id, task_id=task_id, run_id=ti.run_id, link=link, failed=failed,
            who=self._who(context), error=printable(scrub(str(error))) if failed else None,
        )

    def notify(self, context: Context) -> None:
        """Build the notice and send it (nothing for a quiet night).

        :param context: the task context.
        """
        notice = self.notice(context)
        if notice is None:
            self.log.info("metric-gate: the night needs no notice (trusted, no warning)")
            return
        self.send(notice, context)

    def send(self, notice: Notice, context: Context) -> Any:
        """Deliver the notice (implemented by each variant).

        :param notice: what to say.
        :param context: the task context.
        """
        raise NotImplementedError


__all__ = ["MetricGateNotifier"]
