"""Reading runs: one run, runs by identity, and the history window of a night.
"""

from __future__ import annotations

import json
from datetime import datetime

from airflow_metric_gate.store.core import StoreCore
from airflow_metric_gate.store.points import AT_STEP_SQL
from airflow_metric_gate.store.rows import HistoryWindow, RunRow, WindowRun
from airflow_metric_gate.store.sql import (
    BRIDGE_RUNS_SQL,
    CANDIDATE_RUNS_SQL,
    GROUP_BITS,
    HISTORY_WINDOW_SQL,
    RUN_COLUMNS,
    equal_to,
)


class StoreRunReads(StoreCore):
    """Reads run rows and the history window evaluation judges a night against."""

    def get_run(self, run_id: str) -> RunRow | None:
        """Return a run's row, or ``None`` if the store has no such run.

        :param run_id: the store run id.
        """
        with self._transaction() as cur:
            self._execute(cur, f"SELECT {RUN_COLUMNS} FROM runs WHERE run_id = %s", (run_id,))
            row = cur.fetchone()
        return None if row is None else self._run_from_row(row)

    def find_runs(
        self,
        *,
        by: str,
        key: str,
        dag_id: str | None = None,
        series: str | None = None,
        backend: str | None = None,
        suite: str | None = None,
    ) -> list[RunRow]:
        """Return the runs whose store run id, Airflow run id or commit sha is ``key``.

        :param by: ``run_id``, ``airflow_run_id`` (needs ``dag_id``) or ``commit``.
        :param key: the value to match.
        :param dag_id: only runs of this DAG.
        :param series: only runs of this series.
        :param backend: only runs of this backend.
        :param suite: only runs of this suite.
        """
        where, params = self._match(by, key, dag_id, series, backend, suite)
        with self._transaction() as cur:
            self._execute(cur, f"SELECT {RUN_COLUMNS} FROM runs WHERE {where} ORDER BY logical_date, run_id", params)
            return [self._run_from_row(r) for r in cur.fetchall()]

    def list_runs(
        self, *, series: str | None = None, backend: str | None = None, suite: str | None = None, limit: int = 50
    ) -> list[RunRow]:
        """Return runs, newest logical date first.

        :param series: only this series.
        :param backend: only this backend.
        :param suite: only this suite.
        :param limit: at most this many runs.
        """
        sql = f"SELECT {RUN_COLUMNS} FROM runs"
        where, params = equal_to((("series", series), ("backend", backend), ("suite", suite)))
        if where:
            sql += " WHERE " + " AND ".join(where)
        sql += " ORDER BY logical_date DESC, run_id DESC LIMIT %s"
        params.append(limit)
        with self._transaction() as cur:
            self._execute(cur, sql, params)
            return [self._run_from_row(r) for r in cur.fetchall()]

    def judged_candidates(self, run_id: str, limit: int) -> list[tuple[str, datetime, str, str | None, dict]]:
        """Return the earlier judged baseline nights of a run, oldest first (see :data:`CANDIDATE_RUNS_SQL`).

        :param run_id: the store run id.
        :param limit: at most this many nights, the most recent.
        :return: ``(run_id, logical_date, status, latest mark's status or None, outcomes)`` per night.
        """
        return self._candidate_rows(CANDIDATE_RUNS_SQL, run_id, limit)

    def _candidate_rows(self, sql: str, run_id: str, limit: int) -> list[tuple[str, datetime, str, str | None, dict]]:
        with self._transaction() as cur:
            self._execute(cur, sql, (run_id, run_id, limit))
            rows = cur.fetchall()
        out = []
        for rid, date, status, provenance, outcomes in reversed(rows):
            marks = json.loads(provenance or "{}").get("marks") or []
            out.append((rid, self._from_ts(date), status, marks[-1].get("status") if marks else None,
                        json.loads(outcomes or "{}")))
        return out

    def bridge_candidates(self, run_id: str, limit: int) -> list[tuple[str, datetime, str, str | None, dict]]:
        """Return the judged baseline nights of a run before its latest rebaseline marker, oldest first.

        Not before the marker before that one; none when the run has no marker (see :data:`BRIDGE_RUNS_SQL`).

        :param run_id: the store run id.
        :param limit: at most this many nights, the most recent.
        :return: as :meth:`judged_candidates`.
        """
        return self._candidate_rows(BRIDGE_RUNS_SQL, run_id, limit)

    def history_window(self, run_id: str, history_limit: int) -> HistoryWindow:
        """Return the history window of a run, in one statement (see :data:`HISTORY_WINDOW_SQL`).

        The window is what the run's baseline is read from once the window's ``pending`` runs are
        judged: a ``pending`` run in it may still become trusted, so judging the run before then
        would read too little history.  An ``untrusted`` run never enters a baseline, so it takes
        no place in the window.

        :param run_id: the store run id.
        :param history_limit: how many baseline runs the run's baseline reads.
        """
        with self._transaction() as cur:
            self._execute(cur, HISTORY_WINDOW_SQL, (run_id, run_id, history_limit))
            rows = cur.fetchall()
        since = rows[0][4] if rows else None
        runs = [WindowRun(r[0], self._from_ts(r[1]), r[2], r[3]) for r in rows if r[0] is not None]
        return HistoryWindow(
            runs, history_limit, None if since is None else self._from_ts(since), found=bool(rows and rows[0][5])
        )

    def history(
        self,
        metric_key: str,
        *,
        series: str,
        backend: str | None = None,
        suite: str | None = None,
        step: int | None = None,
        limit: int = 50,
    ) -> list[dict]:
        """Return the stored values of a metric for one series, newest first.

        :param metric_key: the metric.
        :param series: the series name.
        :param backend: restrict to one backend.
        :param suite: restrict to one suite.
        :param step: restrict to one stored step.
        :param limit: at most this many rows.
        """
        sql = (
            "SELECT r.run_id, r.logical_date, r.backend, r.suite, r.role, r.status, "
            f"d.steps_key, d.constraint_key, c.step, {AT_STEP_SQL.format(p='v', c='c')}, v.value "
            "FROM runs r CROSS JOIN declarations d JOIN coordinates c ON c.declaration = d.declaration "
            f"JOIN metric_points v ON v.run_key = r.run_key AND (v.coordinate >> {GROUP_BITS}) = "
            f"(c.coordinate >> {GROUP_BITS}) AND v.coordinate = c.coordinate "
            "WHERE "
        )
        where, params = equal_to((("d.metric_key", metric_key), ("r.series", series), ("r.backend", backend),
                                  ("r.suite", suite), ("c.step", step)))
        sql += " AND ".join(where)
        # a value's ordinal: its block's first ordinal plus its distance from the block's first coordinate
        sql += (" ORDER BY r.logical_date DESC, r.run_id DESC, (SELECT b.ordinal - b.coordinate FROM run_blocks b "
                "WHERE b.run_key = v.run_key AND b.coordinate <= v.coordinate ORDER BY b.coordinate DESC LIMIT 1) "
                "+ v.coordinate LIMIT %s")
        params.append(limit)
        keys = (
            "run_id", "logical_date", "backend", "suite", "role", "status",
            "steps_key", "constraint_key", "step", "at_step", "value",
        )
        with self._transaction(indexed=True) as cur:
            self._execute(cur, sql, params)
            rows = [dict(zip(keys, row)) for row in cur.fetchall()]
        for row in rows:
            row["logical_date"] = self._from_ts(row["logical_date"]).isoformat()
        return rows
