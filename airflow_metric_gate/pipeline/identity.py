"""Which run is gated: its series identity, its run info and its store run id."""

from __future__ import annotations

import hashlib
import json
import uuid
from dataclasses import dataclass, field
from datetime import datetime, timezone


@dataclass(frozen=True)
class SeriesIdentity:
    """Which nights are comparable: the training job, its hardware and its schedule (SPEC 4).

    :param series: the training job whose nights are comparable.
    :param backend: the hardware.
    :param suite: the schedule or cluster (e.g. ``nightly-8xh100``).
    """

    series: str
    backend: str = "cuda"
    suite: str = "default"


@dataclass
class RunInfo:
    """The run being gated.

    :param run_id: the store run id (the idempotency key).
    :param role: ``baseline`` (feeds future baselines) or ``shadow`` (audit only).
    :param logical_date: orders history; baselines come from earlier logical dates only.
    :param provenance: ``dag_id``, ``airflow_run_id``, ``try_number``, ``map_index``, ``commit_sha``,
        ``training_job_id`` and any free-form fields.
    """

    run_id: str
    role: str = "baseline"
    logical_date: datetime = field(default_factory=lambda: datetime.now(timezone.utc))
    provenance: dict = field(default_factory=dict)


def new_run_id() -> str:
    """Return a fresh store run id for a run outside Airflow."""
    return f"cli-{datetime.now(timezone.utc):%Y%m%dT%H%M%S}-{uuid.uuid4().hex[:8]}"


def airflow_store_run_id(
    dag_id: str, run_id: str, map_index: int | None = -1, *, task_id: str, identity: SeriesIdentity
) -> str:
    """Return the store run id of an Airflow run: the same for every retry or clear of it.

    The id names one persisting task's run of one series identity, so two gate chains in one DAG
    run (two tasks, or two series) never share a store run.

    :param dag_id: the DAG id.
    :param run_id: the Airflow DAG run id.
    :param map_index: the task's map index (``-1`` when not mapped).
    :param task_id: the persisting task's id.
    :param identity: the series identity the task stores.
    """
    index = -1 if map_index is None else int(map_index)
    key = [dag_id, run_id, task_id, index, identity.series, identity.backend, identity.suite]
    digest = hashlib.sha256(json.dumps(key).encode()).hexdigest()[:24]
    return f"af-{digest}"
