"""The metric store over a DB-API connection (SPEC section 7).

One class serves both dialects; the SQL is written once with ``%s`` placeholders and adapted for
SQLite, and where the dialects differ (bulk load, connection setup, a few clauses) the dialect
subclasses override a hook or a class attribute: most are on
:class:`~airflow_metric_gate.store.core.StoreCore`, the write path's (``_bulk_insert_values``,
``_new_run_key``) on the writing parts, ``_blocks_aggregate`` on the series reads.

Every write is one transaction: a run and all its values, or nothing.  A run's rows are keyed on
its store run id, so writing the same run again replaces its rows instead of adding duplicates.

The class is put together from one part per job:

- :mod:`~airflow_metric_gate.store.core`: connection, transactions, errors, schema;
- :mod:`~airflow_metric_gate.store.coordinates` and :mod:`~airflow_metric_gate.store.writes`: writing a night;
- :mod:`~airflow_metric_gate.store.marks`: marks, rebaseline, accepting a level;
- :mod:`~airflow_metric_gate.store.retention`: ``prune``;
- :mod:`~airflow_metric_gate.store.run_reads` and :mod:`~airflow_metric_gate.store.value_reads`: what
  evaluation reads;
- :mod:`~airflow_metric_gate.store.series_reads`: what the UI and replay read.
"""

from __future__ import annotations

from airflow_metric_gate.store.coordinates import steps_digest
from airflow_metric_gate.store.marks import StoreMarks, with_counts
from airflow_metric_gate.store.retention import StoreRetention
from airflow_metric_gate.store.run_reads import StoreRunReads
from airflow_metric_gate.store.series_reads import StoreSeriesReads
from airflow_metric_gate.store.value_reads import StoreValueReads
from airflow_metric_gate.store.writes import StoreWrites, chunk_groups, groups_of

__all__ = ["MetricStore", "chunk_groups", "groups_of", "steps_digest", "with_counts"]


class MetricStore(StoreWrites, StoreMarks, StoreRetention, StoreRunReads, StoreValueReads, StoreSeriesReads):
    """The metric store: runs, their values, and the baselines read from them.

    :param connect: returns a new DB-API connection; called once, lazily.
    :param description: names the store in messages (a URL without its password).
    """
