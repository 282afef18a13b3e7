"""The rows the store reads and writes: runs, values, history windows and marked runs (SPEC 7)."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime

__all__ = [
    "POINT_COLUMNS",
    "PROVENANCE_COLUMNS",
    "HistoryWindow",
    "MarkedRun",
    "RunRow",
    "ValueRow",
    "WindowRun",
    "Written",
]

#: Provenance keys that have their own ``runs`` column; any other key goes to ``runs.provenance``.
PROVENANCE_COLUMNS = ("dag_id", "airflow_run_id", "try_number", "map_index", "commit_sha", "training_job_id")

#: The columns of ``metric_points``, the table that holds the values (schema version 6).
POINT_COLUMNS = ("run_key", "coordinate", "value", "at_step")


@dataclass
class RunRow:
    """What the store keeps about one gated run (the ``runs`` row, minus its values)."""

    run_id: str
    series: str
    backend: str
    suite: str
    role: str
    status: str
    logical_date: datetime
    provenance: dict = field(default_factory=dict)
    declarations: list = field(default_factory=list)
    selection_errors: list = field(default_factory=list)
    status_reason: str | None = None
    rebaseline: bool = False
    #: What each declaration's night was, by ``json.dumps([metric_key, steps_key, constraint_key])``,
    #: written with the status (see :meth:`MetricStore.set_status`); empty until evaluated.
    outcomes: dict = field(default_factory=dict)
    #: Which write of this run id the stored values are (1 for the first; each write adds one).
    #: Read from the store; ignored when writing.
    write_version: int = 0


@dataclass(frozen=True)
class Written:
    """What :meth:`MetricStore.write_night` stored: how many values, and which write of the run id it was."""

    rows: int
    write_version: int


@dataclass(frozen=True)
class WindowRun:
    """A run in the history window of another run (see :meth:`MetricStore.history_window`)."""

    run_id: str
    logical_date: datetime
    status: str
    airflow_run_id: str | None = None


@dataclass
class HistoryWindow:
    """The earlier runs a run's baseline can come from, newest first.

    :param runs: the window: the ``history_limit`` most recent earlier baseline runs of the series
        identity that are not ``untrusted`` and not before the rebaseline marker.
    :param limit: the ``history_limit`` asked for.
    :param since: the logical date of the rebaseline marker in force, if any.
    :param found: whether the store has the run at all.
    """

    runs: list[WindowRun]
    limit: int
    since: datetime | None = None
    found: bool = True

    @property
    def pending(self) -> list[WindowRun]:
        """The window's runs still ``pending`` (not yet judged), oldest first."""
        return [r for r in reversed(self.runs) if r.status == "pending"]

    @property
    def full(self) -> bool:
        """Whether the window holds ``limit`` runs (an older run could not enter it)."""
        return len(self.runs) >= self.limit

    @property
    def oldest(self) -> datetime | None:
        """The logical date of the oldest run in the window."""
        return self.runs[-1].logical_date if self.runs else None


@dataclass(frozen=True)
class ValueRow:
    """One ``metric_values`` row of a run: a coordinate and its value."""

    ordinal: int
    metric_key: str
    steps_key: str
    constraint_key: str
    step: int
    value: float
    at_step: int | None


@dataclass(frozen=True)
class MarkedRun:
    """A run matched by a mark: as it was before, and what it is now."""

    run: RunRow
    status: str
    reason: str | None

    @property
    def changed(self) -> bool:
        """Whether the run's status changed."""
        return self.run.status != self.status
