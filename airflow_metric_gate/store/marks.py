"""Marks: a run trusted or untrusted by hand, a rebaseline, and accepting a new level.
"""

from __future__ import annotations

import json
import re
from datetime import datetime, timezone
from typing import Any

from airflow_metric_gate.dates import parse_datetime, utc
from airflow_metric_gate.enums import JUDGED_STATUSES
from airflow_metric_gate.store.core import StoreCore
from airflow_metric_gate.store.errors import StoreInputError
from airflow_metric_gate.store.rows import MarkedRun
from airflow_metric_gate.store.sql import RUN_COLUMNS

_COUNTS_NOTE = re.compile(r"^\d+ (PASS|FAIL|INACTIVE|ERROR)(, \d+ (PASS|FAIL|INACTIVE|ERROR))*$")


class StoreMarks(StoreCore):
    """Marks runs (who, when, why) and accepts a level shift."""

    def mark_runs(
        self,
        status: str,
        *,
        by: str,
        key: str,
        reason: str | None = None,
        dag_id: str | None = None,
        series: str | None = None,
        backend: str | None = None,
        suite: str | None = None,
        marked_by: str = "hand",
    ) -> list[MarkedRun]:
        """Mark runs trusted or untrusted by store run id, Airflow run id or commit sha; say what changed.

        Idempotent: a run already in that status keeps it.  A ``reason`` is always recorded, also on
        a run whose status does not change; without one, a run that changes status gets
        ``marked <status> by hand`` and a run that does not is left untouched.

        :param status: ``trusted`` or ``untrusted``.
        :param by: ``run_id``, ``airflow_run_id`` (needs ``dag_id``: Airflow run ids repeat across
            DAGs) or ``commit``.
        :param key: the value to match.
        :param reason: a note kept in ``runs.status_reason``.
        :param dag_id: only runs of this DAG.
        :param series: only runs of this series.
        :param backend: only runs of this backend.
        :param suite: only runs of this suite.
        :param marked_by: who marks (kept with the mark in the run's provenance ``marks``).
        :return: every matching run, as it was, with its new status; empty when nothing matched.
        :raises StoreInputError: on an unknown status or ``by``, or an Airflow run id without ``dag_id``.
        """
        if status not in JUDGED_STATUSES:
            raise StoreInputError(f"can only mark runs trusted or untrusted, not {status!r}")
        where, params = self._match(by, key, dag_id, series, backend, suite)
        marked: list[MarkedRun] = []
        with self._transaction() as cur:
            self._execute(
                cur, f"SELECT {RUN_COLUMNS} FROM runs WHERE {where} ORDER BY logical_date, run_id{self._lock_rows}",
                params,
            )
            at = datetime.now(timezone.utc)
            now = self._ts(at)
            for run in [self._run_from_row(r) for r in cur.fetchall()]:
                changed = run.status != status
                note = reason if reason is not None else (f"marked {status} by hand" if changed else None)
                said = note  # what the mark says, kept with who and when in provenance
                if note is not None:  # the night's counts stay in front: the UI still shows them
                    note = with_counts(run.status_reason, note)
                if changed or (note is not None and note != run.status_reason):
                    # the mark is kept in provenance too: it overrides every declaration's own outcome
                    provenance = dict(run.provenance)
                    entry = {"status": status, "reason": said, "by": marked_by, "at": at.isoformat()}
                    provenance["marks"] = [*provenance.get("marks", []), entry]
                    self._execute(
                        cur,
                        "UPDATE runs SET status = %s, status_reason = %s, provenance = %s, updated_at = %s "
                        "WHERE run_id = %s",
                        (status, note, json.dumps(provenance, sort_keys=True, default=str), now, run.run_id),
                    )
                marked.append(MarkedRun(run, status, note if note is not None else run.status_reason))
        return marked

    def accept_level(self, series: str, backend: str, suite: str, *, since: str, reason: str,
                     by: str) -> dict[str, Any]:
        """Accept a series' level from a night on, in one transaction (see :mod:`airflow_metric_gate.accept`).

        :param series: the series name.
        :param backend: the backend.
        :param suite: the suite.
        :param since: the first night of the new level: a store run id, or an ISO 8601 logical date.
        :param reason: why (required).
        :param by: who accepts.
        :return: ``{"since", "since_run_id", "nights", "marked"}``.
        :raises StoreInputError: no reason, or no baseline night of the series at or after ``since``.
        """
        if not reason or not reason.strip():
            raise StoreInputError("accepting a level needs a reason")
        at = datetime.now(timezone.utc)
        with self._transaction() as cur:
            self._execute(cur, "SELECT logical_date FROM runs WHERE run_id = %s AND series = %s AND backend = %s "
                          "AND suite = %s", (since, series, backend, suite))
            row = cur.fetchone()
            if row is not None:
                start = self._from_ts(row[0])
            else:
                try:
                    start = utc(parse_datetime(since, "--since"))
                except (ValueError, OverflowError):
                    raise StoreInputError(
                        f"--since {since!r} is neither a store run id of series {series!r} (backend {backend!r}, "
                        f"suite {suite!r}) nor an ISO 8601 date") from None
            self._execute(
                cur, f"SELECT {RUN_COLUMNS} FROM runs WHERE series = %s AND backend = %s AND suite = %s "
                "AND role = 'baseline' AND status <> 'pending' AND logical_date >= %s "
                f"ORDER BY logical_date, run_id{self._lock_rows}",
                (series, backend, suite, self._ts(start)),
            )
            runs = [self._run_from_row(r) for r in cur.fetchall()]
            if not runs:
                raise StoreInputError(
                    f"series {series!r} (backend {backend!r}, suite {suite!r}) has no judged baseline night at or "
                    f"after {start.isoformat()}; nothing was changed")
            now = self._ts(at)
            accepted = f"accepted level since {runs[0].logical_date.isoformat()} by {by}: {reason.strip()}"
            self._execute(cur, "UPDATE runs SET rebaseline = %s, updated_at = %s WHERE run_id = %s",
                          (self._bool(True), now, runs[0].run_id))
            marked = 0
            for run in runs:
                provenance = dict(run.provenance)
                entry = {"status": "trusted", "reason": accepted, "by": by, "at": at.isoformat(), "accept": True}
                provenance["marks"] = [*provenance.get("marks", []), entry]
                marked += run.status != "trusted"
                self._execute(
                    cur, "UPDATE runs SET status = %s, status_reason = %s, provenance = %s, updated_at = %s "
                    "WHERE run_id = %s",
                    ("trusted", with_counts(run.status_reason, accepted), json.dumps(provenance, sort_keys=True,
                                                                                   default=str), now, run.run_id),
                )
        return {"since": runs[0].logical_date.isoformat(), "since_run_id": runs[0].run_id, "nights": len(runs),
                "marked": marked}

    def mark(
        self,
        status: str,
        *,
        by: str,
        key: str,
        reason: str | None = None,
        dag_id: str | None = None,
        series: str | None = None,
        backend: str | None = None,
        suite: str | None = None,
    ) -> int:
        """Mark runs trusted or untrusted (see :meth:`mark_runs`); return how many changed status.

        :param status: ``trusted`` or ``untrusted``.
        :param by: ``run_id``, ``airflow_run_id`` or ``commit``.
        :param key: the value to match.
        :param reason: a note kept in ``runs.status_reason``.
        :param dag_id: only runs of this DAG (see :meth:`mark_runs`).
        :param series: only runs of this series.
        :param backend: only runs of this backend.
        :param suite: only runs of this suite.
        :return: how many runs changed status.
        """
        marked = self.mark_runs(status, by=by, key=key, reason=reason, dag_id=dag_id, series=series, backend=backend,
                                suite=suite)
        return sum(m.changed for m in marked)

    def mark_rebaseline(self, run_id: str, on: bool = True) -> int:
        """Start (or stop) a fresh baseline at a run: later runs of its series ignore older history.

        :param run_id: the store run id.
        :param on: ``False`` removes the marker.
        :return: how many runs changed.
        """
        with self._transaction() as cur:
            self._execute(
                cur,
                "UPDATE runs SET rebaseline = %s, updated_at = %s WHERE run_id = %s AND rebaseline <> %s",
                (self._bool(on), self._ts(datetime.now(timezone.utc)), run_id, self._bool(on)),
            )
            return cur.rowcount

    def mark_run(self, run_id: str, status: str, *, reason: str, marked_by: str, at: datetime) -> int:
        """Mark one run (by store run id) trusted or untrusted by hand, and record who did it and why.

        The status, ``status_reason`` (the evaluation's counts, then ``marked <status> by <user>:
        <reason>``) and an entry appended to the run's provenance list ``marks`` (``{"status",
        "reason", "by", "at"}``) are written in one transaction.
        Idempotent: a run already in that status is left as it is.

        :param run_id: the store run id.
        :param status: ``trusted`` or ``untrusted``.
        :param reason: why (required, non-empty).
        :param marked_by: the user's name.
        :param at: when (kept in provenance).
        :return: how many runs changed (0 or 1).
        """
        if status not in JUDGED_STATUSES:
            raise StoreInputError(f"can only mark runs trusted or untrusted, not {status!r}")
        if not reason or not reason.strip():
            raise StoreInputError("marking a run needs a reason")
        with self._transaction() as cur:
            self._execute(
                cur, f"SELECT status, provenance, status_reason FROM runs WHERE run_id = %s{self._lock_rows}",
                (run_id,),
            )
            row = cur.fetchone()
            if row is None or row[0] == status:
                return 0
            provenance = json.loads(row[1] or "{}")
            # Keep the evaluation's own note ("9 PASS, 4 FAIL") in front of the mark.
            evaluated = (row[2] or "").split("; marked ", 1)[0]
            note = f"marked {status} by {marked_by}: {reason.strip()}"
            if evaluated and not evaluated.startswith("marked "):
                note = f"{evaluated}; {note}"
            entry = {"status": status, "reason": reason.strip(), "by": marked_by, "at": utc(at).isoformat()}
            provenance["marks"] = [*provenance.get("marks", []), entry]
            self._execute(
                cur,
                "UPDATE runs SET status = %s, status_reason = %s, provenance = %s, updated_at = %s "
                "WHERE run_id = %s AND status <> %s",
                (
                    status, note,
                    json.dumps(provenance, sort_keys=True, default=str), self._ts(datetime.now(timezone.utc)),
                    run_id, status,
                ),
            )
            return cur.rowcount


def with_counts(status_reason: str | None, note: str) -> str:
    """Return a mark's note after the evaluation's counts kept in ``status_reason`` (``"9 PASS, 1 FAIL; <note>"``).

    :param status_reason: the run's ``status_reason`` before the mark.
    :param note: the mark's note.
    """
    evaluated = (status_reason or "").split(";", 1)[0].strip()
    return f"{evaluated}; {note}" if _COUNTS_NOTE.match(evaluated) else note
