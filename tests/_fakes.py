"""The fakes of Airflow's task context shared by the tests: a task instance, a DAG run, a context.

Enough to call an operator's ``execute`` (or render its fields) without an Airflow database: the
task instance's identity, XCom push and pull, the DAG run's type and dates.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

from airflow.sdk import DAG

LOGICAL_DATE = datetime(2026, 11, 30, tzinfo=timezone.utc)
RUN_ID = "scheduled__2026-11-30T00:00:00+00:00"


@dataclass
class FakeTI:
    """The task-instance surface the operators use: identity, XCom push and pull.

    :param upstream: what ``xcom_pull`` answers, by ``(task_ids, map_indexes)``; a key ``(task_ids, None)``
        answers any map index (as Airflow does, rendering a field, for an unmapped upstream).
    :param pushed: what ``xcom_push`` received, by key, as it comes back from JSON.
    :param previous_dagruns: what ``get_previous_dagrun(state=...)`` answers, by state (other nights' runs).
    """

    dag_id: str = "nightly"
    run_id: str = RUN_ID
    task_id: str = "task"
    try_number: int = 1
    map_index: int = -1
    upstream: dict[tuple[str, Any], Any] = field(default_factory=dict)
    pushed: dict[str, Any] = field(default_factory=dict)
    previous_dagruns: dict[str, Any] = field(default_factory=dict)

    def xcom_push(self, key: str, value: Any) -> None:
        # XCom is strict JSON: anything else would fail in Airflow; kept as it is read back.
        self.pushed[key] = json.loads(json.dumps(value, allow_nan=False))

    def get_previous_dagrun(self, state: str | None = None) -> Any:
        return self.previous_dagruns.get(state)

    def xcom_pull(self, task_ids: str, map_indexes: Any = -1, key: str = "return_value", **kwargs: Any) -> Any:
        if (task_ids, map_indexes) in self.upstream:
            return self.upstream[(task_ids, map_indexes)]
        return self.upstream.get((task_ids, None))


@dataclass
class FakeDagRun:
    run_type: str = "scheduled"
    logical_date: datetime | None = LOGICAL_DATE
    run_after: datetime = LOGICAL_DATE


def context(
    *,
    run_type: str = "scheduled",
    logical_date: datetime | None = LOGICAL_DATE,
    run_after: datetime = LOGICAL_DATE,
    **ti: Any,
) -> dict[str, Any]:
    """Return a context for one task instance.

    :param run_type: the DAG run type (``scheduled``, ``manual``, ...).
    :param logical_date: the run's logical date (``None`` like some Airflow 3 manual runs).
    :param run_after: when the run was due (what Airflow orders manual runs by).
    :param ti: :class:`FakeTI` fields.
    """
    dag_run = FakeDagRun(run_type=run_type, logical_date=logical_date, run_after=run_after)
    return {"ti": FakeTI(**ti), "dag_run": dag_run, "logical_date": logical_date}


def night_context(night: datetime, **ti: Any) -> dict[str, Any]:
    """Return the context of a scheduled run of the night ``night`` (logical date and due date alike).

    :param night: the night's logical date.
    :param ti: :class:`FakeTI` fields.
    """
    return context(logical_date=night, run_after=night, **ti)


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
