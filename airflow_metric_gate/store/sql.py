"""The store's longer SQL statements, written once with ``%s`` placeholders for both dialects.

:class:`~airflow_metric_gate.store.base.MetricStore` adapts the placeholders for SQLite.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np

__all__ = ["BASELINE_RUNS_SQL", "BRIDGE_RUNS_SQL", "CANDIDATE_RUNS_SQL", "GROUP_BITS", "HISTORY_WINDOW_SQL",
           "RANGE_PARAMS", "RUN_COLUMNS", "baseline_params", "baseline_sql", "equal_to", "float8_values", "group_of",
           "in_ranges", "joined_ranges", "night_arrays_params", "night_arrays_sql", "ranges_params", "run_values_sql"]

#: The run being judged (``cur``) and the latest rebaseline marker of its series identity at or
#: before its logical date (``fence``), shared by the statements that read its earlier runs.
_CUR_AND_FENCE = """
WITH cur AS (
    SELECT series, backend, suite, logical_date FROM runs WHERE run_id = %s
),
fence AS (
    SELECT MAX(r.logical_date) AS since
    FROM runs r JOIN cur ON r.series = cur.series AND r.backend = cur.backend AND r.suite = cur.suite
    WHERE r.rebaseline = TRUE AND r.logical_date <= cur.logical_date
)"""

#: The baseline runs of a run: the most recent trusted baseline runs of its series identity with an
#: earlier logical date, not before the latest rebaseline marker (at most ``history_limit``).
BASELINE_RUNS_SQL = _CUR_AND_FENCE + """
SELECT r.run_id, r.run_key
FROM runs r JOIN cur ON r.series = cur.series AND r.backend = cur.backend AND r.suite = cur.suite
CROSS JOIN fence
WHERE r.role = 'baseline' AND r.status = 'trusted'
  AND r.logical_date < cur.logical_date AND r.run_id <> %s
  AND (fence.since IS NULL OR r.logical_date >= fence.since)
ORDER BY r.logical_date DESC, r.run_id DESC
LIMIT %s
"""

#: The earlier baseline nights of a run that are judged (trusted or untrusted), not before the latest
#: rebaseline marker, the most recent first: the calibrated policy picks each declaration's history
#: from them (trust per declaration).
CANDIDATE_RUNS_SQL = _CUR_AND_FENCE + """
SELECT r.run_id, r.logical_date, r.status, r.provenance, r.outcomes
FROM runs r JOIN cur ON r.series = cur.series AND r.backend = cur.backend AND r.suite = cur.suite
CROSS JOIN fence
WHERE r.role = 'baseline' AND r.status <> 'pending'
  AND r.logical_date < cur.logical_date AND r.run_id <> %s
  AND (fence.since IS NULL OR r.logical_date >= fence.since)
ORDER BY r.logical_date DESC, r.run_id DESC
LIMIT %s
"""

#: The judged baseline nights of a run before its latest rebaseline marker and not before the marker
#: before that one, the most recent first: the calibrated policy carries their spread over to the new
#: level while the nights since the marker are too few to calibrate on (a bridge).  None without a marker.
BRIDGE_RUNS_SQL = _CUR_AND_FENCE + """,
before AS (
    SELECT MAX(r.logical_date) AS since
    FROM runs r JOIN cur ON r.series = cur.series AND r.backend = cur.backend AND r.suite = cur.suite
    CROSS JOIN fence
    WHERE r.rebaseline = TRUE AND r.logical_date < fence.since
)
SELECT r.run_id, r.logical_date, r.status, r.provenance, r.outcomes
FROM runs r JOIN cur ON r.series = cur.series AND r.backend = cur.backend AND r.suite = cur.suite
CROSS JOIN fence CROSS JOIN before
WHERE r.role = 'baseline' AND r.status <> 'pending'
  AND r.logical_date < fence.since AND r.run_id <> %s
  AND (before.since IS NULL OR r.logical_date >= before.since)
ORDER BY r.logical_date DESC, r.run_id DESC
LIMIT %s
"""

#: The history window of a run: its earlier baseline runs of the same series identity that are not
#: ``untrusted``, not before the latest rebaseline marker, the ``history_limit`` most recent of them.
#: These are the runs its baseline is read from once every ``pending`` one among them is decided.
#: One row per window run (one row of nulls when the window is empty), each with the rebaseline
#: fence and whether the run exists.
HISTORY_WINDOW_SQL = _CUR_AND_FENCE + """,
win AS (
    SELECT r.run_id, r.logical_date, r.status, r.airflow_run_id
    FROM runs r JOIN cur ON r.series = cur.series AND r.backend = cur.backend AND r.suite = cur.suite
    CROSS JOIN fence
    WHERE r.role = 'baseline' AND r.status <> 'untrusted'
      AND r.logical_date < cur.logical_date AND r.run_id <> %s
      AND (fence.since IS NULL OR r.logical_date >= fence.since)
    ORDER BY r.logical_date DESC, r.run_id DESC
    LIMIT %s
)
SELECT win.run_id, win.logical_date, win.status, win.airflow_run_id, fence.since, (SELECT COUNT(*) FROM cur)
FROM fence LEFT JOIN win ON TRUE
ORDER BY win.logical_date DESC, win.run_id DESC
"""

#: The baselines of every coordinate of a run in one statement.  Each baseline run's rows are read
#: by their own branch, through the (run, coordinate group) index, so the cost follows the number of
#: baseline runs and coordinates, never the length of the stored history.
_BASELINE_SQL = """
SELECT c.coordinate, {select}
FROM metric_points c
JOIN ({runs}) h ON h.coordinate = c.coordinate
WHERE c.run_key = %s{where}
{group}"""
_BASELINE_RUN_BRANCH = "SELECT coordinate, value FROM metric_points WHERE run_key = %s"


def run_values_sql(runs: int, *, ranges: int = 0, by_run: bool = False) -> str:
    """Return the statement reading, for each coordinate of a run, its value in each of ``runs`` other runs.

    Parameters: the other runs' ``run_key``, then the run's.  Rows: ``(coordinate, position of the
    other run among those given, value)``.

    :param runs: how many other run ids are bound.
    :param ranges: read only the coordinates in this many ranges (parameters as :func:`baseline_params`
        gives them); 0 reads every coordinate of the run.
    :param by_run: one row per other run instead, ``(position, coordinates, values)`` with two arrays
        in the same order (PostgreSQL ``array_agg``: one row per night to fetch, not one per value).
    """
    branches = "\n    UNION ALL ".join(
        f"SELECT {i} AS k, coordinate, value FROM metric_points WHERE run_key = %s" + in_ranges("coordinate", ranges)
        for i in range(runs))
    sql = _BASELINE_SQL.format(select="h.k, h.value", runs=branches, where=in_ranges("c.coordinate", ranges),
                               group="")
    if by_run:  # both arrays in coordinate order (a run has one value per coordinate), so they pair up
        return (f"SELECT q.k, array_agg(q.coordinate ORDER BY q.coordinate), array_agg(q.value ORDER BY q.coordinate) "
                f"FROM ({sql}) q GROUP BY q.k")
    return sql


def night_arrays_sql(runs: int, ranges: int) -> str:
    """Return the statement reading each of ``runs`` runs' values in some coordinate ranges as one array.

    Parameters: per run, its ``run_key`` then the ranges' bounds.  Rows: one per run, ``(position,
    count, values)``, the values in coordinate order as PostgreSQL's binary array (:func:`float8_values`),
    ``NULL`` with a count of 0 for a run with none.  Each run is aggregated on its own, through the
    (run, coordinate group) index: no join, no sort across runs.  The ranges must hold only coordinates the
    judged run has (its blocks), so that a count equal to theirs means the same coordinates.

    :param runs: how many runs.
    :param ranges: how many coordinate ranges (at least one).
    """
    return "\nUNION ALL ".join(
        f"SELECT {i} AS k, COUNT(*), array_send(array_agg(value ORDER BY coordinate)) FROM metric_points "
        "WHERE run_key = %s" + in_ranges("coordinate", ranges) for i in range(runs))


def night_arrays_params(run_keys: Sequence[int], ranges: Sequence[tuple[int, int]]) -> list[int]:
    """Return the parameters of :func:`night_arrays_sql`.

    :param run_keys: the runs' keys.
    :param ranges: the coordinate ranges, ``(lowest, highest)``.
    """
    bounds = ranges_params(ranges)
    return [x for key in run_keys for x in (key, *bounds)]


def baseline_sql(baseline_runs: int, *, arrays: bool = False, ranges: int = 0) -> str:
    """Return the statement reading the baselines of a run from ``baseline_runs`` baseline runs.

    Parameters: the baseline runs' ``run_key``, then the run's.  It returns the baseline values themselves
    and leaves aggregating to the caller: a sum taken by the database depends on the order it scans
    the rows in (and SQLite and PostgreSQL sum differently), so the same history could give
    different means at band edges.

    :param baseline_runs: how many baseline run ids are bound.
    :param arrays: one row per coordinate with an array of its values (PostgreSQL ``array_agg``; less
        to transfer and nothing to group in Python), instead of one row per value.
    :param ranges: read only the coordinates in this many ranges (both ends bound as parameters,
        see :func:`baseline_params`); 0 reads every coordinate of the run.
    """
    runs = "\n    UNION ALL ".join([_BASELINE_RUN_BRANCH + in_ranges("coordinate", ranges)] * baseline_runs)
    where = in_ranges("c.coordinate", ranges)
    if arrays:
        return _BASELINE_SQL.format(select="array_agg(h.value)", runs=runs, where=where,
                                    group="GROUP BY c.coordinate\n")
    return _BASELINE_SQL.format(select="h.value", runs=runs, where=where, group="")


_FLOAT8_OID = 701
_ARRAY_HEADER = struct.Struct(">iiiii")  # dimensions, a NULL flag, the element type, size, lower bound


#: One element of a ``float8[]`` in binary form: its length (8), then its big-endian IEEE 754 value.
_FLOAT8_ELEMENT = np.dtype([("length", ">i4"), ("value", ">f8")])


def float8_values(blob: bytes | memoryview) -> np.ndarray:
    """Read a one-dimensional ``float8[]`` without NULLs in PostgreSQL's binary form (``array_send``).

    The header (dimensions, a NULL flag, the element type, then size and lower bound per
    dimension) is followed by each element's length and its big-endian IEEE 754 value: the very
    floats the server holds, with no float written out as text and parsed again.

    :param blob: the ``bytea`` the statement returned.
    :return: the values, as native ``float64``.
    :raises ValueError: not a one-dimensional array of non-NULL ``float8``.
    """
    data = memoryview(blob)
    if len(data) >= 12 and int.from_bytes(data[0:4], "big") == 0:
        return np.empty(0)  # an empty array has no dimension
    if len(data) < _ARRAY_HEADER.size:
        raise ValueError("expected a one-dimensional float8 array without NULLs")
    dims, nulls, oid, count, _ = _ARRAY_HEADER.unpack_from(data)
    if dims != 1 or nulls or oid != _FLOAT8_OID or len(data) != _ARRAY_HEADER.size + 12 * count:
        raise ValueError("expected a one-dimensional float8 array without NULLs")
    elements = np.frombuffer(data, dtype=_FLOAT8_ELEMENT, count=count, offset=_ARRAY_HEADER.size)
    if count and not (elements["length"] == 8).all():
        raise ValueError("expected a one-dimensional float8 array without NULLs")
    return elements["value"].astype(np.float64)


#: ``metric_points`` is indexed on PostgreSQL by ``(run_key, coordinate >> GROUP_BITS)`` (schema
#: version 8): a run's values in groups of 64 consecutive coordinates, each group one index entry
#: with the addresses of its rows (B-tree deduplication), about 6 bytes a value where a key of its
#: own per row took 20.  A statement reaches a run's rows by group, then keeps the coordinates it
#: wants.
GROUP_BITS = 6


def group_of(coordinate: int) -> int:
    """Return the index group of a coordinate (see :data:`GROUP_BITS`).

    :param coordinate: the coordinate's number.
    """
    return coordinate >> GROUP_BITS


def in_ranges(column: str, ranges: int) -> str:
    """`` AND ((column >> 6) BETWEEN %s AND %s AND column BETWEEN %s AND %s OR ...)`` for ``ranges`` ranges.

    Each range names its groups (the index's second column) and its coordinates: four parameters a
    range, as :func:`ranges_params` gives them; nothing at all for no range.

    :param column: the column the ranges bound.
    :param ranges: how many ranges.
    """
    if not ranges:
        return ""
    one = f"({column} >> {GROUP_BITS}) BETWEEN %s AND %s AND {column} BETWEEN %s AND %s"
    return " AND (" + " OR ".join([one] * ranges) + ")"


def joined_ranges(ranges: Iterable[tuple[int, int]]) -> list[tuple[int, int]]:
    """Return coordinate ranges with the ones that touch or overlap joined, in order.

    A chunk's ranges are its declarations' blocks, whose coordinates usually follow each other: one
    range to read (one stretch of the index per night) instead of one per declaration, each tested
    on every row.

    :param ranges: ``(lowest, highest)`` ranges, both ends inclusive, in any order.
    """
    joined: list[tuple[int, int]] = []
    for lo, hi in sorted(ranges):
        if joined and lo <= joined[-1][1] + 1:
            joined[-1] = (joined[-1][0], max(joined[-1][1], hi))
        else:
            joined.append((lo, hi))
    return joined


#: Parameters :func:`in_ranges` binds per range.
RANGE_PARAMS = 4


def ranges_params(ranges: Sequence[tuple[int, int]]) -> list[int]:
    """Return the parameters of :func:`in_ranges`: each range's groups, then its ends.

    :param ranges: the coordinate ranges ``(lowest, highest)``, both ends inclusive.
    """
    return [x for lo, hi in ranges for x in (group_of(lo), group_of(hi), lo, hi)]


def baseline_params(baseline_keys: Sequence[int], run_key: int, ranges: Sequence[tuple[int, int]] = ()) -> list[int]:
    """Return the parameters of :func:`baseline_sql` with ``len(ranges)`` ranges.

    :param baseline_keys: the baseline runs' ``run_key``.
    :param run_key: the run's ``run_key``.
    :param ranges: the coordinate ranges ``(lowest, highest)`` read, both ends inclusive.
    """
    bounds = ranges_params(ranges)
    return [p for key in baseline_keys for p in (key, *bounds)] + [run_key, *bounds]


#: The columns of ``runs`` that :class:`~airflow_metric_gate.store.rows.RunRow` is read from, in its order.
RUN_COLUMNS = (
    "run_id, series, backend, suite, role, status, logical_date, provenance, declarations, "
    "selection_errors, status_reason, rebaseline, outcomes, write_version"
)


def equal_to(columns: Iterable[tuple[str, Any]]) -> tuple[list[str], list[Any]]:
    """Return ``column = %s`` conditions, and their parameters, for the columns whose value is given.

    :param columns: ``(column, value)`` pairs; a pair whose value is ``None`` sets no condition.
    """
    given = [(column, value) for column, value in columns if value is not None]
    return [f"{column} = %s" for column, _ in given], [value for _, value in given]
