"""Assets in and out: the night an Asset event names, and the "gated metrics" event of a trusted night.

In: a gate DAG scheduled on the training job's Asset gets its night from the event (a partitioned
asset's partition key, or the event's extra ``night``), see :func:`event_night`.  Out:
:class:`PublishGatedMetricsOperator` emits the series' "gated metrics" Asset event on a trusted
night, and never on another.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from airflow.sdk import Asset, BaseOperator
from airflow.sdk.exceptions import AirflowSkipException

from airflow_metric_gate.decision.policy import reports_only
from airflow_metric_gate.operators._shared import upstream_value

if TYPE_CHECKING:
    from airflow.sdk import Context


#: The key of an Asset event's extra that names the night the event is about.
NIGHT_EXTRA = "night"


def event_night(triggering_asset_events: Any, dag_run: Any = None) -> str | None:
    """Return the night the Asset events that created a DAG run name (the latest event wins).

    A partitioned asset's run has its ``partition_key``; any other event names its night in its
    extra's ``night``.  Usable as a template macro (``user_defined_macros={"event_night": event_night}``,
    then ``"{{ event_night(triggering_asset_events, dag_run) }}"``) to build the record's path.

    :param triggering_asset_events: the context's ``triggering_asset_events`` (asset -> events).
    :param dag_run: the DAG run (its ``partition_key`` wins when set).
    """
    key = getattr(dag_run, "partition_key", None)
    if isinstance(key, str) and key.strip():
        return key.strip()
    try:
        found = [e for events in (triggering_asset_events or {}).values() for e in events]
    except Exception:  # not an asset-triggered run, or no API server to ask
        return None
    nights = []
    for e in found:
        extra = getattr(e, "extra", None)
        value = extra.get(NIGHT_EXTRA) if isinstance(extra, Mapping) else None
        if value is None:
            value = getattr(e, "partition_key", None)
        if isinstance(value, str) and value.strip():
            nights.append((str(getattr(e, "timestamp", "") or ""), value.strip()))
    return max(nights)[1] if nights else None


def gated_metrics_asset(series: str, backend: str = "cuda", suite: str = "default") -> Asset:
    """Return the "gated metrics" Asset of a series identity: ``metric-gate://<series>/<backend>/<suite>``.

    A downstream DAG scheduled on it runs after each trusted night of the series.

    :param series: the series.
    :param backend: the backend.
    :param suite: the suite.
    """
    return Asset(uri=f"metric-gate://{series}/{backend}/{suite}", name=f"gated-metrics/{series}/{backend}/{suite}",
                 group="metric-gate")


def gated_metrics_extra(verdict: Mapping) -> dict[str, Any]:
    """Return the extra of a trusted night's Asset event: the verdict's identity and counts.

    ``{"schema", "series", "backend", "suite", "run_id", "logical_date", "night", "trusted", "counts"}``
    plus ``policy`` when the verdict names one.

    :param verdict: the night's verdict.
    """
    extra = {
        "schema": verdict["schema"],
        "series": verdict["series"],
        "backend": verdict["backend"],
        "suite": verdict["suite"],
        "run_id": verdict["run_id"],
        "logical_date": verdict["logical_date"],
        "night": str(verdict["logical_date"])[:10],
        "trusted": bool(verdict["trusted"]),
        "counts": dict(verdict["counts"]),
    }
    if verdict.get("policy"):
        extra["policy"] = verdict["policy"]
    return extra


class PublishGatedMetricsOperator(BaseOperator):
    """Emit the "gated metrics" Asset event of a trusted night (and nothing on any other night).

    Give it the Asset as ``outlets`` (:func:`gated_metrics_asset` names one per series identity).
    On a trusted baseline night it sets each outlet's event extra to :func:`gated_metrics_extra`,
    so a consumer DAG scheduled on the Asset (promote a checkpoint) gets the night's identity and
    counts from ``triggering_asset_events``.  An untrusted night, a shadow run, or a night without a
    verdict skips the task: a skipped task emits no Asset event.

    :param verdict: the evaluate task's verdict; ``None`` takes it from the only upstream task's
        XCom (templated).
    :param kwargs: passed to :class:`~airflow.sdk.BaseOperator` (``outlets`` among them).
    """

    template_fields: Sequence[str] = ("verdict",)
    ui_color = "#e3f1e6"

    def __init__(self, *, verdict: Mapping[str, Any] | None = None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.verdict = verdict

    def execute(self, context: Context) -> dict[str, Any]:
        """Set the event extra of each outlet, or skip.

        :param context: the task context.
        :return: the extra (also the XCom ``return_value``).
        """
        verdict = self.verdict if self.verdict is not None else upstream_value(self, context, "verdict")
        if not isinstance(verdict, Mapping) or "trusted" not in verdict:
            raise AirflowSkipException("no verdict: no gated metrics event")
        if reports_only(verdict):
            raise AirflowSkipException("a shadow run: no gated metrics event (only baseline nights are announced)")
        if not verdict["trusted"]:
            raise AirflowSkipException(
                f"night {verdict['logical_date']} of {verdict['series']} is not trusted: no gated metrics event"
            )
        extra = gated_metrics_extra(verdict)
        assets = [o for o in self.outlets if isinstance(o, Asset)]
        for asset in assets:
            context["outlet_events"][asset].extra = extra
        self.log.info("metric-gate: trusted night %s of %s announced on %s", extra["night"], extra["series"],
                      ", ".join(a.uri for a in assets) or "no outlet")
        return extra


__all__ = ["PublishGatedMetricsOperator", "gated_metrics_asset", "gated_metrics_extra"]
