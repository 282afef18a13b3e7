"""A minimal task context for calling operators' ``execute`` without an Airflow database."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

from airflow.sdk import DAG

LOGICAL_DATE = datetime(2026, 11, 30, tzinfo=timezone.utc)


@dataclass
class FakeTI:
    """The task-instance surface the operators use: identity, XCom push and pull."""

    dag_id: str = "nightly"
    run_id: str = "scheduled__2026-11-30T00:00:00+00:00"
    task_id: str = "task"
    try_number: int = 1
    map_index: int = -1
    upstream: dict[tuple[str, int], Any] = field(default_factory=dict)
    pushed: dict[str, Any] = field(default_factory=dict)
    #: what ``get_previous_dagrun(state=...)`` answers, by state (the DAG runs of other nights)
    previous_dagruns: dict[str, Any] = field(default_factory=dict)

    def xcom_push(self, key: str, value: Any) -> None:
        json.dumps(value, allow_nan=False)  # XCom is strict JSON: anything else would fail in Airflow
        self.pushed[key] = value

    def get_previous_dagrun(self, state: str | None = None) -> Any:
        return self.previous_dagruns.get(state)

    def xcom_pull(self, task_ids: str, map_indexes: int = -1, key: str = "return_value") -> Any:
        return self.upstream.get((task_ids, map_indexes))


@dataclass
class FakeDagRun:
    run_type: str = "scheduled"
    logical_date: datetime | None = LOGICAL_DATE
    run_after: datetime = LOGICAL_DATE


def context(
    *,
    run_type: str = "scheduled",
    logical_date: datetime | None = LOGICAL_DATE,
    **ti: Any,
) -> dict[str, Any]:
    """Return a context for one task instance.

    :param run_type: the DAG run type (``scheduled``, ``manual``, ...).
    :param logical_date: the run's logical date (``None`` like some Airflow 3 manual runs).
    :param ti: :class:`FakeTI` fields.
    """
    dag_run = FakeDagRun(run_type=run_type, logical_date=logical_date)
    return {"ti": FakeTI(**ti), "dag_run": dag_run, "logical_date": logical_date}


def chained(operator_cls: type, upstream_task_id: str = "upstream", **kwargs: Any):
    """Build an operator with one upstream task, in a throwaway DAG.

    :param operator_cls: the operator class.
    :param upstream_task_id: the upstream task's id.
    :param kwargs: the operator's arguments.
    """
    from airflow.providers.standard.operators.empty import EmptyOperator

    with DAG(dag_id="unit", schedule=None):
        upstream = EmptyOperator(task_id=upstream_task_id)
        op = operator_cls(task_id="task", **kwargs)
        upstream >> op
    return op
