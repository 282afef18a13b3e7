"""What the UI reads from Airflow itself: a task instance, its verdict XCom, and the store's connection."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from airflow_metric_gate.store import MetricStore

EVALUATE_OPERATOR = "EvaluateGateOperator"


@dataclass
class TaskVerdict:
    """A task instance as the task-instance view needs it."""

    operator: str | None
    state: str | None
    verdict: Any


def task_verdict(dag_id: str, run_id: str, task_id: str, map_index: int) -> TaskVerdict | None:
    """Return a task instance's operator, state and ``return_value`` XCom (``None``: no such task instance).

    Two primary-key lookups in the metadata database, with bound parameters.

    :param dag_id: the DAG id.
    :param run_id: the DAG run id.
    :param task_id: the task id.
    :param map_index: the map index (``-1`` when not mapped).
    """
    from airflow.models.taskinstance import TaskInstance
    from airflow.models.xcom import XComModel
    from airflow.utils.session import create_session
    from sqlalchemy import select

    with create_session() as session:
        row = session.execute(
            select(TaskInstance.operator, TaskInstance.state).where(
                TaskInstance.dag_id == dag_id,
                TaskInstance.run_id == run_id,
                TaskInstance.task_id == task_id,
                TaskInstance.map_index == map_index,
            )
        ).first()
        if row is None:
            return None
        xcom = session.execute(
            select(XComModel.value).where(
                XComModel.dag_id == dag_id,
                XComModel.run_id == run_id,
                XComModel.task_id == task_id,
                XComModel.map_index == map_index,
                XComModel.key == "return_value",
            )
        ).first()
    verdict = XComModel.deserialize_value(xcom) if xcom is not None else None
    state = getattr(row.state, "value", row.state)
    return TaskVerdict(operator=row.operator, state=state, verdict=verdict)


def open_ui_store() -> MetricStore:
    """Open the metric store behind the ``[metric_gate] conn_id`` connection, read by the api-server.

    Through :class:`~airflow_metric_gate.hooks.metric_store.MetricStoreHook`, as the operators:
    the same connection types (``metric_gate``, ``postgres``, ``sqlite``) and timeouts.

    :raises StoreInputError: the connection's type cannot hold the store.
    :raises StoreUnavailable: the connection cannot be read.
    """
    from airflow_metric_gate.hooks.metric_store import MetricStoreHook

    return MetricStoreHook().get_store()
