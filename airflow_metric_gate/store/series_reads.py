"""Reads for the UI and replay: one series identity at a time, bounded, each served by an index.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator, Sequence
from datetime import datetime
from itertools import chain
from typing import Any

from airflow_metric_gate.store.core import StoreCore
from airflow_metric_gate.store.errors import StoreInputError
from airflow_metric_gate.store.points import AT_STEP_SQL, read_at_step
from airflow_metric_gate.store.rows import RunRow, ValueRow
from airflow_metric_gate.store.sql import (
    BASELINE_RUNS_SQL,
    GROUP_BITS,
    RUN_COLUMNS,
    group_of,
    in_ranges,
    ranges_params,
)


class StoreSeriesReads(StoreCore):
    """Reads one series identity for the UI pages and for replay."""

    @staticmethod
    def _dag_filter(dag_ids: Iterable[str] | None, include_unowned: bool) -> tuple[str, list[Any]]:
        """Return an SQL condition on ``r.dag_id`` (bound parameters) for the DAGs a reader may see."""
        if dag_ids is None:
            return "", []
        ids = sorted(set(dag_ids))
        parts = []
        if ids:
            parts.append(f"r.dag_id IN ({', '.join(['%s'] * len(ids))})")
        if include_unowned:
            parts.append("r.dag_id IS NULL")
        if not parts:
            return " AND 1 = 0", []
        return f" AND ({' OR '.join(parts)})", ids

    def series_identities(self, *, limit: int = 500) -> list[dict]:
        """Return each series identity with the DAGs that wrote it, its run count and latest logical date.

        One row per (series, backend, suite, dag_id), ordered by series identity.

        :param limit: at most this many rows.
        """
        sql = (
            "SELECT series, backend, suite, dag_id, COUNT(*), MAX(logical_date) FROM runs "
            "GROUP BY series, backend, suite, dag_id ORDER BY series, backend, suite, dag_id LIMIT %s"
        )
        with self._transaction() as cur:
            self._execute(cur, sql, (limit,))
            rows = cur.fetchall()
        keys = ("series", "backend", "suite", "dag_id", "runs", "latest")
        out = [dict(zip(keys, row)) for row in rows]
        for row in out:
            row["latest"] = self._from_ts(row["latest"])
        return out

    def series_dag_ids(self, series: str, backend: str, suite: str) -> set[str | None]:
        """Return the DAG ids (``None`` for runs written outside Airflow) that wrote a series identity.

        :param series: the series name.
        :param backend: the backend.
        :param suite: the suite.
        """
        with self._transaction() as cur:
            self._execute(
                cur,
                "SELECT DISTINCT dag_id FROM runs WHERE series = %s AND backend = %s AND suite = %s",
                (series, backend, suite),
            )
            return {row[0] for row in cur.fetchall()}

    def series_runs(
        self,
        series: str,
        backend: str,
        suite: str,
        *,
        dag_ids: Iterable[str] | None = None,
        include_unowned: bool = True,
        limit: int = 50,
        offset: int = 0,
        declarations: bool = True,
    ) -> list[RunRow]:
        """Return one page of the runs of a series identity, newest logical date first.

        Served by ``runs_series_date_idx``; no values are read.

        :param series: the series name.
        :param backend: the backend.
        :param suite: the suite.
        :param dag_ids: only runs written by these DAGs (``None``: any).
        :param include_unowned: with ``dag_ids``, also the runs with no DAG (written by the CLI).
        :param limit: page size.
        :param offset: runs to skip.
        :param declarations: also read each run's declarations (a page of runs does not need them).
        """
        where, params = self._dag_filter(dag_ids, include_unowned)
        columns = RUN_COLUMNS if declarations else RUN_COLUMNS.replace("declarations,", "NULL,", 1)
        sql = (
            f"SELECT {columns} FROM runs r WHERE r.series = %s AND r.backend = %s AND r.suite = %s{where} "
            "ORDER BY r.logical_date DESC, r.run_id DESC LIMIT %s OFFSET %s"
        )
        with self._transaction() as cur:
            self._execute(cur, sql, (series, backend, suite, *params, limit, offset))
            return [self._run_from_row(r) for r in cur.fetchall()]

    def coordinate_history(
        self,
        series: str,
        backend: str,
        suite: str,
        *,
        metric_key: str,
        steps_key: str,
        constraint_key: str,
        step: int,
        until: datetime | None = None,
        dag_ids: Iterable[str] | None = None,
        include_unowned: bool = True,
        limit: int = 30,
    ) -> list[dict]:
        """Return one coordinate's value in the latest runs of a series identity, oldest first.

        The runs come from ``runs_series_date_idx`` in logical-date order; each run's value is one
        lookup in the values' index by run and coordinate group.  Runs without that coordinate are left out.

        :param series: the series name.
        :param backend: the backend.
        :param suite: the suite.
        :param metric_key: the coordinate's metric.
        :param steps_key: the coordinate's steps key.
        :param constraint_key: the coordinate's constraint key.
        :param step: the stored step.
        :param until: only runs with a logical date at or before this one.
        :param dag_ids: only runs written by these DAGs (``None``: any).
        :param include_unowned: with ``dag_ids``, also the runs with no DAG.
        :param limit: at most this many runs (the latest ones).
        :return: dicts with ``run_id``, ``logical_date``, ``role``, ``status``, ``dag_id``,
            ``airflow_run_id``, ``value`` and ``at_step``.
        """
        where, params = self._dag_filter(dag_ids, include_unowned)
        if until is not None:
            where += " AND r.logical_date <= %s"
            params = [*params, self._ts(until)]
        sql = (
            "SELECT r.run_id, r.logical_date, r.role, r.status, r.dag_id, r.airflow_run_id, v.value, v.at_step "
            f"FROM runs r JOIN metric_points v ON v.run_key = r.run_key AND (v.coordinate >> {GROUP_BITS}) = %s "
            "AND v.coordinate = %s "
            f"WHERE r.series = %s AND r.backend = %s AND r.suite = %s{where} "
            "ORDER BY r.logical_date DESC, r.run_id DESC LIMIT %s"
        )
        keys = ("run_id", "logical_date", "role", "status", "dag_id", "airflow_run_id", "value", "at_step")
        with self._transaction(indexed=True) as cur:
            declaration = self._declaration_ids(cur, [(metric_key, steps_key, constraint_key)], add=False)
            if not declaration:
                return []
            self._execute(cur, "SELECT coordinate FROM coordinates WHERE declaration = %s AND step = %s",
                          (next(iter(declaration.values())), step))
            found = cur.fetchone()
            if found is None:
                return []
            self._execute(cur, sql, (group_of(found[0]), found[0], series, backend, suite, *params, limit))
            rows = [dict(zip(keys, row)) for row in cur.fetchall()]
        for row in rows:
            row["logical_date"] = self._from_ts(row["logical_date"])
            row["at_step"] = read_at_step(step, row["at_step"])
        rows.reverse()
        return rows

    def declaration_values(
        self, run_id: str, metric_key: str, steps_key: str, constraint_key: str, *, limit: int = 10_000
    ) -> list[ValueRow]:
        """Return the values one declaration stored for a run, in step order (a range of the run's key).

        :param run_id: the store run id.
        :param metric_key: the declaration's metric.
        :param steps_key: the declaration's steps key.
        :param constraint_key: the declaration's constraint key.
        :param limit: at most this many values.
        """
        with self._transaction(indexed=True) as cur:
            found = self._declaration_ids(cur, [(metric_key, steps_key, constraint_key)], add=False)
            run_key = self._run_key(cur, run_id)
            if not found or run_key is None:
                return []
            declaration = next(iter(found.values()))
            ordinals = self._ordinals(cur, run_key, declaration)
            if not ordinals.blocks:
                return []
            lo, hi = ordinals.declarations()[declaration]
            self._execute(
                cur,
                "SELECT p.coordinate, c.step, p.value, p.at_step FROM metric_points p "
                "JOIN coordinates c ON c.coordinate = p.coordinate "
                "WHERE p.run_key = %s" + in_ranges("p.coordinate", 1) + " AND c.declaration = %s "
                "ORDER BY c.step LIMIT %s",
                (run_key, *ranges_params([(lo, hi)]), declaration, limit),
            )
            return [ValueRow(ordinals.ordinal(coordinate), metric_key, steps_key, constraint_key, step, value,
                             read_at_step(step, at)) for coordinate, step, value, at in cur.fetchall()]

    def declaration_baselines(
        self, run_id: str, metric_key: str, steps_key: str, constraint_key: str, history_limit: int
    ) -> dict[int, list[float]]:
        """Return the baseline values of every step of one declaration of a run, by step.

        The baseline runs are those :meth:`run_values_and_baselines` uses for the same ``history_limit``.

        :param run_id: the store run id.
        :param metric_key: the declaration's metric.
        :param steps_key: the declaration's steps key.
        :param constraint_key: the declaration's constraint key.
        :param history_limit: how many baseline runs.
        """
        out: dict[int, list[float]] = {}
        with self._transaction(indexed=True) as cur:
            self._execute(cur, BASELINE_RUNS_SQL, (run_id, run_id, history_limit))
            base = [int(row[1]) for row in cur.fetchall()]
            found = self._declaration_ids(cur, [(metric_key, steps_key, constraint_key)], add=False)
            if not base or not found:
                return out
            declaration = next(iter(found.values()))
            self._execute(cur, "SELECT MIN(coordinate), MAX(coordinate) FROM coordinates WHERE declaration = %s",
                          (declaration,))
            lo, hi = cur.fetchone()
            # The baseline runs as a VALUES list joined on the (run, coordinate group) index: one short
            # range per run.
            runs = ", ".join(["(%s)"] * len(base))
            self._execute(
                cur,
                f"SELECT c.step, m.value FROM (VALUES {runs}) b JOIN metric_points m ON m.run_key = b.column1"
                + in_ranges("m.coordinate", 1) + " JOIN coordinates c ON c.coordinate = m.coordinate "
                "WHERE c.declaration = %s",
                (*base, *ranges_params([(lo, hi)]), declaration),
            )
            for step, value in cur.fetchall():
                out.setdefault(step, []).append(value)
        return out

    def count(self, table: str, run_id: str | None = None) -> int:
        """Return the row count of ``runs`` or ``metric_values`` (optionally of one run).

        :param table: ``runs`` or ``metric_values``.
        :param run_id: count only this run's rows.
        """
        if table not in ("runs", "metric_values"):
            raise StoreInputError(f"unknown table {table!r}")
        sql = "SELECT COUNT(*) FROM runs" if table == "runs" else "SELECT COUNT(*) FROM metric_points"
        params: tuple = ()
        if run_id is not None:
            sql += (" WHERE run_id = %s" if table == "runs"
                    else " WHERE run_key = (SELECT run_key FROM runs WHERE run_id = %s)")
            params = (run_id,)
        with self._transaction() as cur:
            self._execute(cur, sql, params)
            return int(cur.fetchone()[0])

    def series_runs_and_blocks(
        self, series: str, backend: str, suite: str
    ) -> list[tuple[RunRow, list[tuple[str, str, str, int]]]]:
        """Return every run of one series identity in logical-date order with the blocks of its values.

        One statement.  A block is the values of one declaration in a run, ``(metric_key,
        steps_key, constraint_key, count)``; a run's blocks come in the order the database itself
        sorts their keys in (:meth:`_key_order`, then :meth:`_in_key_order`), and
        :meth:`iter_series_points` yields their values in that same order, so that replay reads no
        key per value.

        :param series: the series name.
        :param backend: the backend.
        :param suite: the suite.
        """
        blocks = self._blocks_aggregate() + (
            "FROM (SELECT d.metric_key, d.steps_key, d.constraint_key, SUM(w.length) AS n "
            "FROM run_blocks w JOIN declarations d ON d.declaration = w.declaration "
            "WHERE w.run_key = runs.run_key GROUP BY d.metric_key, d.steps_key, d.constraint_key) b)")
        with self._transaction() as cur:
            self._execute(
                cur,
                f"SELECT {RUN_COLUMNS}, {blocks} FROM runs WHERE series = %s AND backend = %s AND suite = %s "
                "ORDER BY logical_date, run_id",
                (series, backend, suite),
            )
            rows = cur.fetchall()
        return [(self._run_from_row(row), self._in_key_order(json.loads(row[len(row) - 1] or "[]")))
                for row in rows]

    def _key_order(self, alias: str) -> str:
        """The ``ORDER BY`` terms of a run's values by their keys, the same in both statements of replay.

        Text is compared byte by byte as the database stores it (``COLLATE "C"`` on PostgreSQL,
        SQLite's default), never by a language's collation.

        :param alias: the table alias.
        """
        c = self._byte_collation
        return f"{alias}.metric_key{c}, {alias}.steps_key{c}, {alias}.constraint_key{c}"

    def _blocks_aggregate(self) -> str:
        """The start of the subquery of :meth:`series_runs_and_blocks` that lists a run's blocks as JSON.

        A dialect whose aggregate can order (PostgreSQL) orders them here, by :meth:`_key_order`.
        """
        return "(SELECT json_group_array(json_array(b.metric_key, b.steps_key, b.constraint_key, b.n)) "

    def _in_key_order(self, blocks: list[list]) -> list[tuple[str, str, str, int]]:
        """Return a run's blocks in the order :meth:`_key_order` sorts their values in.

        The statement of :meth:`series_runs_and_blocks` already ordered them; a dialect whose
        aggregate cannot order overrides this.

        :param blocks: ``[metric_key, steps_key, constraint_key, count]`` lists.
        """
        return [tuple(b) for b in blocks]

    def iter_series_points(
        self, series: str, backend: str, suite: str, *, batch: int = 10_000
    ) -> Iterator[tuple[int, float, int | None]]:
        """Yield every stored value of one series identity in one ordered pass, without its keys.

        Values come in the order of :meth:`series_runs_and_blocks` (logical date, run id), then by
        ``(metric_key, steps_key, constraint_key, step)``, as ``(step, value, at_step)``; the runs'
        blocks say which declaration each value belongs to.  One statement, fetched in batches,
        whatever the number of runs or coordinates.  The order is the one of the unique key of the
        values, so the embedded store reads them from its index without sorting (the run's rowid
        tells it that no two runs share a place in the order); the text keys are compared as
        :meth:`_key_order` says.

        :param series: the series name.
        :param backend: the backend.
        :param suite: the suite.
        :param batch: rows fetched at a time.
        """
        return chain.from_iterable(self.iter_series_point_batches(series, backend, suite, batch=batch))

    def iter_series_point_batches(
        self, series: str, backend: str, suite: str, *, batch: int = 10_000
    ) -> Iterator[list[tuple[int, float, int | None]]]:
        """Yield the values of :meth:`iter_series_points` in lists of at most ``batch``, as fetched.

        :param series: the series name.
        :param backend: the backend.
        :param suite: the suite.
        :param batch: rows fetched at a time.
        """
        keys = self._key_order("d")
        sql = (
            f"SELECT c.step, v.value, {AT_STEP_SQL.format(p='v', c='c')} "
            "FROM runs r JOIN metric_points v ON v.run_key = r.run_key "
            "JOIN coordinates c ON c.coordinate = v.coordinate JOIN declarations d ON d.declaration = c.declaration "
            "WHERE r.series = %s AND r.backend = %s AND r.suite = %s "
            f"ORDER BY r.logical_date, r.run_id, {keys}, c.step"
        )
        return self._batches(sql, (series, backend, suite), batch)

    def _batches(self, sql: str, params: Sequence[Any], batch: int) -> Iterator[list[tuple]]:
        """Yield the rows of one statement in lists of ``batch``, in one read transaction."""
        with self._transaction() as cur:
            self._execute(cur, sql, params)
            while True:
                rows = cur.fetchmany(batch)
                if not rows:
                    break
                yield rows
