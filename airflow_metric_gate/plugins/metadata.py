"""What the UI reads from Airflow itself: a task instance, its verdict XCom, and the store's connection."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from airflow_metric_gate.store import MetricStore, StoreInputError, open_store

EVALUATE_OPERATOR = "EvaluateGateOperator"
DEFAULT_CONN_ID = "metric_gate_db"


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


def conn_id() -> str:
    """Return the store's Airflow connection id: ``[metric_gate] conn_id`` (as the operators' default)."""
    from airflow.configuration import conf

    return conf.get("metric_gate", "conn_id", fallback=DEFAULT_CONN_ID) or DEFAULT_CONN_ID


def open_ui_store() -> MetricStore:
    """Open the metric store behind the ``[metric_gate] conn_id`` connection, read by the api-server.

    A ``postgres`` connection opens the production store; a ``sqlite`` connection (host or schema
    naming the file) the embedded one.

    :raises StoreInputError: the connection's type cannot hold the store.
    """
    import psycopg2
    from airflow.models.connection import Connection

    name = conn_id()
    connection = Connection.get_connection_from_secrets(name)
    conn_type = (connection.conn_type or "").lower()
    if conn_type in ("postgres", "postgresql"):
        from airflow_metric_gate.store.postgres import PostgresStore

        params = {
            "host": connection.host or "localhost",
            "port": connection.port or 5432,
            "user": connection.login,
            "password": connection.password,
            "dbname": connection.schema or None,
        }
        params = {k: v for k, v in params.items() if v is not None}
        return PostgresStore(lambda: psycopg2.connect(**params), description=f"postgres connection {name!r}")
    if conn_type == "sqlite":
        path = connection.host or connection.schema
        if path:
            return open_store(f"sqlite:///{path}")
    raise StoreInputError(
        f"connection {name!r} of type {conn_type or 'unknown'!r} cannot hold the metric store (use postgres)"
    )
