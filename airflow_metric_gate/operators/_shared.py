"""Helpers of the operators: upstream input, the run's role and night.

The store's connection is :class:`~airflow_metric_gate.hooks.metric_store.MetricStoreHook`'s; the
base class and the mapping of errors are in :mod:`airflow_metric_gate.operators.base`.
"""

from __future__ import annotations

from datetime import date, datetime
from typing import TYPE_CHECKING, Any

from airflow.sdk.exceptions import AirflowFailException

from airflow_metric_gate.dates import parse_datetime, utc
from airflow_metric_gate.enums import ROLES, Role

if TYPE_CHECKING:
    from airflow.sdk import BaseOperator, Context

#: DAG run types whose runs feed future baselines when the role is ``auto``; every other run is shadow.
#: A run the training job's Asset event created is a nightly run like a scheduled one.
BASELINE_RUN_TYPES = ("scheduled", "backfill", "asset_triggered")


def optional(value: Any) -> Any:
    """Return ``value``, or ``None`` for an empty string (what a template renders for "not given").

    :param value: a parameter value after template rendering.
    """
    if isinstance(value, str) and not value.strip():
        return None
    return value


def upstream_value(operator: BaseOperator, context: Context, what: str) -> Any:
    """Return the ``return_value`` XCom of the operator's only upstream task.

    Under dynamic task mapping the upstream task instance with the same map index is read first.

    :param operator: the operator whose input was not given explicitly.
    :param context: the task context.
    :param what: names the missing parameter in the error message.
    :raises AirflowFailException: there is not exactly one upstream task, or it pushed nothing.
    """
    upstream = sorted(operator.upstream_task_ids)
    if len(upstream) != 1:
        raise AirflowFailException(
            f"{operator.task_id}: {what} was not given and cannot be taken from an upstream task's XCom "
            f"(upstream tasks: {upstream or 'none'}); pass {what}=<upstream task>.output or a value"
        )
    ti = context["ti"]
    value = None
    map_index = getattr(ti, "map_index", -1)
    if map_index is not None and map_index >= 0:
        value = ti.xcom_pull(task_ids=upstream[0], map_indexes=map_index)
    if value is None:
        value = ti.xcom_pull(task_ids=upstream[0], map_indexes=-1)
    if value is None:
        raise AirflowFailException(
            f"{operator.task_id}: {what} was not given and upstream task {upstream[0]!r} pushed no XCom return_value"
        )
    return value


def run_role(role: str | None, context: Context) -> str:
    """Return the store role of this run: explicit, or from the DAG run type.

    :param role: ``baseline``, ``shadow``, or ``None``/``""``/``"auto"`` for the DAG run type's
        default: scheduled, backfill and asset-triggered runs are ``baseline``, manual and every other
        run ``shadow``.
    :param context: the task context.
    :raises AirflowFailException: ``role`` is none of these.
    """
    role = optional(role)
    if role is None or role == "auto":
        run_type = getattr(context["dag_run"], "run_type", None)
        run_type = getattr(run_type, "value", run_type)
        return Role.BASELINE.value if run_type in BASELINE_RUN_TYPES else Role.SHADOW.value
    if Role.problem(role, "role"):
        raise AirflowFailException(f"role must be {', '.join(repr(r) for r in ROLES)} or 'auto', got {role!r}")
    return role


def _parse_night(night: Any, task_id: str) -> datetime:
    if isinstance(night, datetime):
        value = night
    elif isinstance(night, date):
        value = datetime(night.year, night.month, night.day)
    else:
        try:
            value = parse_datetime(str(night).strip(), "night")
        except ValueError as err:
            raise AirflowFailException(
                f"{task_id}: night must be a date (YYYY-MM-DD) or an ISO 8601 datetime, got {night!r}; "
                "nothing was stored"
            ) from err
    return utc(value)


def asset_night(context: Context) -> str | None:
    """Return the night an Asset event gives this DAG run, if it was created by one.

    :param context: the task context (``triggering_asset_events``, ``dag_run``); see
        :func:`~airflow_metric_gate.operators.assets.event_night`.
    """
    from airflow_metric_gate.operators.assets import event_night

    try:
        events = context.get("triggering_asset_events")
    except Exception:  # no API server to ask
        events = None
    return event_night(events, context.get("dag_run"))


def run_night(night: Any, role: str, context: Context, task_id: str) -> datetime:
    """Return the night a run is stored under (its logical date in the store), aware UTC.

    The night comes from ``night`` when given (the DAG's ``night`` param), else from the run's
    logical date, else, for a run an Asset event created (no logical date), from the event
    (:func:`asset_night`).  Runs made by ``airflow dags trigger`` in Airflow 3 have no logical date: a
    shadow run is then stored at its ``run_after`` (it feeds no baseline), a baseline run is
    refused, since "now" would sort it after later nights.

    :param night: the operator's ``night`` (a date, an ISO 8601 string, or ``None``/``""``).
    :param role: the run's role (``baseline`` or ``shadow``).
    :param context: the task context.
    :param task_id: names the task in messages.
    :raises AirflowFailException: ``night`` is not a date, or a baseline run has no night at all.
    """
    night = optional(night)
    if night is not None:
        return _parse_night(night, task_id)
    dag_run = context["dag_run"]
    value = context.get("logical_date") or getattr(dag_run, "logical_date", None)
    if value is None:
        from_event = asset_night(context)
        if from_event is not None:
            return _parse_night(from_event, task_id)
        run_type = getattr(getattr(dag_run, "run_type", None), "value", getattr(dag_run, "run_type", None))
        if role == "baseline" and run_type == "asset_triggered":
            raise AirflowFailException(
                f"{task_id}: this DAG run was created by an Asset event that names no night: give the event a "
                "partition key (a partitioned asset) or an extra {\"night\": \"YYYY-MM-DD\"} where the "
                "training job emits it. Nothing was stored"
            )
        if role == "baseline":
            dag_id = getattr(context.get("ti"), "dag_id", None) or "<dag_id>"
            raise AirflowFailException(
                f"{task_id}: a baseline run needs its night, and this DAG run has no logical date (runs made by "
                "`airflow dags trigger` have none) and no night was given. Pass the night as the DAG's night "
                f"param: `airflow dags trigger {dag_id} --conf '{{\"night\": \"YYYY-MM-DD\"}}'` (the operator's "
                f"night=\"{{{{ params.night }}}}\"), or give the run a logical date: `airflow dags trigger {dag_id} "
                "--logical-date YYYY-MM-DDT00:00:00+00:00`. Nothing was stored"
            )
        value = dag_run.run_after
    return _parse_night(value, task_id)
