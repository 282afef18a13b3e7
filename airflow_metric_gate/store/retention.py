"""Retention: removing old nights (``metric-gate prune``), whole months at a time where the dialect can.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from airflow_metric_gate.dates import utc
from airflow_metric_gate.store.core import StoreCore
from airflow_metric_gate.store.errors import StoreInputError
from airflow_metric_gate.store.sql import equal_to


class StoreRetention(StoreCore):
    """Prunes runs and their values."""

    def _whole_months(self, cur: Any, run_keys: list[int]) -> set[int]:
        """In prune's transaction, before it removes anything: the run keys of the months it empties.

        Those months' values go with their partition (:meth:`_drop_months`) instead of row by row.
        """
        return set()

    def _drop_months(self, cur: Any, run_keys: set[int], *, dry_run: bool) -> tuple[set[int], list[str], int]:
        """In prune's transaction, last: drop the partitions of the months :meth:`_whole_months` named.

        :return: the run keys whose values went with a partition, the partitions' names, and how
            many values they held.
        """
        return set(), [], 0

    def prune(
        self,
        *,
        keep: int | None = None,
        before: datetime | None = None,
        protect: int,
        series: str | None = None,
        backend: str | None = None,
        suite: str | None = None,
        force: bool = False,
        dry_run: bool = False,
    ) -> dict[str, Any]:
        """Remove old nights (runs and their values) of each series identity, in one transaction.

        A night is removed when it matches every criterion given: it is not among the ``keep``
        most recent nights of its series identity, and its logical date is before ``before``.
        Unless ``force``, the nights a current baseline may use are kept: per series identity the
        ``protect`` most recent judged baseline nights (what the next night's baseline is chosen
        from, under either policy), the night that carries the latest rebaseline marker, every
        ``pending`` night, and while fewer than ``protect`` judged baseline nights are at or after
        that marker, the ``protect`` judged baseline nights before it (what the calibrated policy
        bridges a short new level with).

        :param keep: keep the most recent ``keep`` nights of each series identity (any role).
        :param before: remove only nights whose logical date is before this.
        :param protect: how many of the most recent judged baseline nights a baseline may read.
        :param series: only this series.
        :param backend: only this backend.
        :param suite: only this suite.
        :param force: remove matching nights even when a current baseline uses them.
        :param dry_run: say what would be removed; change nothing.
        :return: ``{"nights", "values", "kept_for_baselines", "series", "run_ids", "partitions_dropped"}``
            (PostgreSQL drops a month's partition of ``metric_points`` when every run of it goes).
        :raises StoreInputError: neither ``keep`` nor ``before``, or a negative ``keep``.
        """
        if keep is None and before is None:
            raise StoreInputError("prune needs --keep N or --before DATE (or both)")
        if keep is not None and keep < 0:
            raise StoreInputError(f"--keep must be >= 0, got {keep}")
        where, params = equal_to((("series", series), ("backend", backend), ("suite", suite)))
        sql = "SELECT run_id, series, backend, suite, role, status, logical_date, rebaseline FROM runs"
        if where:
            sql += " WHERE " + " AND ".join(where)
        sql += " ORDER BY series, backend, suite, logical_date DESC, run_id DESC"
        removed: list[str] = []
        kept = 0
        identities: set[tuple[str, str, str]] = set()
        values = 0
        with self._transaction(indexed=True) as cur:
            self._execute(cur, sql + self._lock_rows, params)
            by_identity: dict[tuple[str, str, str], list[tuple]] = {}
            for row in cur.fetchall():
                by_identity.setdefault((row[1], row[2], row[3]), []).append(row)
            cutoff = None if before is None else utc(before)
            for identity, nights in by_identity.items():
                judged = 0
                fenced = bridging = False
                older = 0  # judged baseline nights older than the latest marker
                for position, (run_id, _, _, _, role, status, date, rebaseline) in enumerate(nights):
                    marker = bool(rebaseline) and not fenced
                    used = status == "pending" or marker
                    if role == "baseline" and status != "pending":
                        if bridging:  # a new level still short of its own history: its bridge (calibrated)
                            used = used or older < protect
                            older += 1
                        used = used or judged < protect
                        judged += 1
                    if marker:
                        fenced = True
                        bridging = judged < protect
                    if keep is not None and position < keep:
                        continue
                    if cutoff is not None and self._from_ts(date) >= cutoff:
                        continue
                    if used and not force:
                        kept += 1
                        continue
                    removed.append(run_id)
                    identities.add(identity)
            batches = []
            for start in range(0, len(removed), _PRUNE_BATCH):
                batch = removed[start:start + _PRUNE_BATCH]
                marks = ", ".join(["%s"] * len(batch))
                self._execute(cur, f"SELECT run_key FROM runs WHERE run_id IN ({marks})", batch)
                batches.append((batch, [int(row[0]) for row in cur.fetchall()]))
            # the values of the months it empties go with their partition, once the rest is deleted
            whole = self._whole_months(cur, [k for _, keys in batches for k in keys])
            for batch, run_keys in batches:
                values += self._remove_values(cur, [k for k in run_keys if k not in whole], dry_run=dry_run)
                if not dry_run:
                    marks = ", ".join(["%s"] * len(batch))
                    keyed = ", ".join(["%s"] * len(run_keys))
                    self._execute(cur, f"DELETE FROM run_blocks WHERE run_key IN ({keyed})", run_keys)
                    self._execute(cur, f"DELETE FROM runs WHERE run_id IN ({marks})", batch)
            gone, partitions, dropped = self._drop_months(cur, whole, dry_run=dry_run)
            values += dropped + self._remove_values(cur, sorted(whole - gone), dry_run=dry_run)
        return {"nights": len(removed), "values": values, "kept_for_baselines": kept, "series": len(identities),
                "run_ids": removed, "partitions_dropped": partitions}

    def _remove_values(self, cur: Any, run_keys: list[int], *, dry_run: bool) -> int:
        """Delete (unless ``dry_run``) the ``metric_points`` rows of these runs; return how many there are."""
        values = 0
        for start in range(0, len(run_keys), _PRUNE_BATCH):
            chunk = run_keys[start:start + _PRUNE_BATCH]
            keyed = ", ".join(["%s"] * len(chunk))
            self._execute(cur, f"SELECT COUNT(*) FROM metric_points WHERE run_key IN ({keyed})", chunk)
            values += int(cur.fetchone()[0])
            if not dry_run:
                self._execute(cur, f"DELETE FROM metric_points WHERE run_key IN ({keyed})", chunk)
        return values


#: Runs removed per statement by :meth:`MetricStore.prune`.
_PRUNE_BATCH = 500
