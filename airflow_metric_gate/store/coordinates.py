"""A series' coordinates: each (declaration, step) stored once, and the rows of a night that refer to them.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping, Sequence
from itertools import islice, repeat
from operator import gt
from typing import Any

from airflow_metric_gate.store.core import _KEY_BATCH, StoreCore
from airflow_metric_gate.store.points import Block, PointGroup, PointRows, blocks_of


class StoreCoordinates(StoreCore):
    """Finds or adds the declarations and coordinates a night's values refer to."""

    def _insert_coordinates(self, cur: Any, declaration: int, steps: list[int]) -> None:
        """Add the coordinates of one declaration at these steps, numbered in the order given."""
        cur.executemany(
            self._sql("INSERT INTO coordinates (declaration, step) VALUES (%s, %s) ON CONFLICT DO NOTHING"),
            [(declaration, step) for step in steps],
        )

    def _coordinates_of(self, cur: Any, wanted: Sequence[tuple[int, Sequence[int]]]) -> list[Sequence[int]]:
        """Return the coordinates of the steps of each ``(declaration, steps)``, adding those the store lacks.

        A declaration whose steps the store holds already, numbered one after the other in the order
        given (every night after the first), is confirmed by one summary row per declaration
        (:meth:`_aligned_coordinates`) and comes back as a ``range``.  The others are read, a range of
        steps per declaration (so a chunk of a large declaration reads about as many coordinates as it
        has steps), in as few statements as :attr:`max_parameters` allows.

        :param wanted: ``(declaration id, steps in ordinal order)``; new coordinates are numbered in it.
        :return: the coordinates, parallel to each entry's steps.
        """
        aligned = self._aligned_coordinates(cur, wanted)
        out: list[Sequence[int]] = [
            range(aligned[i], aligned[i] + len(steps)) if i in aligned else () for i, (_, steps) in enumerate(wanted)]
        rest = [i for i in range(len(wanted)) if i not in aligned]
        if not rest:
            return out
        ranges: dict[int, tuple[int, int]] = {}
        for i in rest:
            declaration, steps = wanted[i]
            lo, hi = min(steps), max(steps)
            if declaration in ranges:
                lo, hi = min(lo, ranges[declaration][0]), max(hi, ranges[declaration][1])
            ranges[declaration] = (lo, hi)
        known = self._read_coordinates(cur, ranges)
        missing: dict[int, list[int]] = {}
        for i in rest:
            declaration, steps = wanted[i]
            have = known[declaration]
            seen = set(missing.get(declaration, ()))
            for step in steps:
                if step not in have and step not in seen:
                    seen.add(step)
                    missing.setdefault(declaration, []).append(step)
        if missing:
            for declaration, steps in missing.items():
                self._insert_coordinates(cur, declaration, steps)
            known.update(self._read_coordinates(cur, {d: ranges[d] for d in missing}))
        for i in rest:
            declaration, steps = wanted[i]
            out[i] = list(map(known[declaration].__getitem__, steps))
        return out

    def _aligned_coordinates(self, cur: Any, wanted: Sequence[tuple[int, Sequence[int]]]) -> dict[int, int]:
        """Return ``{position in wanted: first coordinate}`` of the entries the store holds aligned.

        An entry is aligned when the store's coordinates of its declaration between its lowest and
        highest step are exactly its steps, numbered one after the other in the order given: then
        the coordinate of its ``i``-th step is the first plus ``i``.  The store says so in one row
        per declaration, its count, lowest and highest coordinate and a digest of its steps in
        coordinate order (:attr:`_steps_digest_sql`; the dialect reads them with a lateral join);
        without such a digest nothing is aligned.
        """
        if self._steps_digest_sql is None:
            return {}
        declarations = [declaration for declaration, _ in wanted]
        entries = [i for i, d in enumerate(declarations) if declarations.count(d) == 1] \
            if len(set(declarations)) != len(declarations) else list(range(len(wanted)))
        aligned: dict[int, int] = {}
        most = max(1, min(_KEY_BATCH, self.max_parameters // 3))
        for start in range(0, len(entries), most):
            part = entries[start:start + most]
            by_declaration = {wanted[i][0]: i for i in part}
            params: list[int] = []
            for i in part:
                declaration, steps = wanted[i]
                params += (declaration, min(steps), max(steps))
            # one index range per declaration (an OR of ranges is planned as one scan of them all)
            self._execute(cur, "SELECT w.d, x.* FROM (VALUES " + ", ".join(["(%s, %s, %s)"] * len(part))
                          + ") AS w (d, lo, hi) CROSS JOIN LATERAL (SELECT COUNT(*), MIN(coordinate), "
                          f"MAX(coordinate), {self._steps_digest_sql} FROM coordinates "
                          "WHERE declaration = w.d AND step BETWEEN w.lo AND w.hi) AS x", params)
            for declaration, count, first, last, digest in cur.fetchall():
                if not count:
                    continue
                i = by_declaration[declaration]
                steps = wanted[i][1]
                n = len(steps)
                if count == n and last - first + 1 == n and digest == steps_digest(steps):
                    aligned[i] = int(first)
        return aligned

    def _read_coordinates(self, cur: Any, ranges: Mapping[int, tuple[int, int]]) -> dict[int, dict[int, int]]:
        """Return ``{declaration: {step: coordinate}}`` of the coordinates within each declaration's steps range."""
        known: dict[int, dict[int, int]] = {declaration: {} for declaration in ranges}
        items = list(ranges.items())
        most = max(1, min(_KEY_BATCH, self.max_parameters // 3))
        for start in range(0, len(items), most):
            part = items[start:start + most]
            where = " OR ".join(["(declaration = %s AND step BETWEEN %s AND %s)"] * len(part))
            self._execute(cur, f"SELECT declaration, step, coordinate FROM coordinates WHERE {where}",
                          [x for declaration, (lo, hi) in part for x in (declaration, lo, hi)])
            for declaration, step, coordinate in cur.fetchall():
                known[declaration][step] = coordinate
        return known

    def _points_of(self, cur: Any, run_key: int, groups: Sequence[PointGroup],
                   declarations: dict[tuple[str, str, str], int]) -> tuple[PointRows, list[Block]]:
        """Return one chunk's ``metric_points`` rows and blocks, numbering coordinates first seen.

        :param groups: the chunk's values, in ordinal order.
        :param declarations: the declaration ids known so far, by keys (added to).
        :return: the rows, sorted by coordinate, and the chunk's blocks in ordinal order.
        """
        new = list(dict.fromkeys(g.keys for g in groups if g.keys not in declarations))
        if new:
            declarations.update(self._declaration_ids(cur, new, add=True))
        ids = [declarations[g.keys] for g in groups]
        found = self._coordinates_of(cur, [(d, g.steps) for d, g in zip(ids, groups)])
        blocks: list[Block] = []
        coordinates: list[int] = []
        values: list[float] = []
        stored: list[int | None] | None = None
        for g, declaration, known in zip(groups, ids, found):
            n = len(known)
            if isinstance(known, range):  # as every night after the first: one block
                blocks.append((known.start, g.ordinal, n, declaration))
            else:
                blocks.extend(blocks_of(zip(range(g.ordinal, g.ordinal + n), known, repeat(declaration))))
            at = g.stored_at_steps()
            if at is not None and stored is None:
                stored = [None] * len(coordinates)
            if stored is not None:
                stored.extend([None] * n if at is None else at)
            coordinates.extend(known)
            values.extend(map(float, g.values))
        if any(map(gt, coordinates, islice(coordinates, 1, None))):
            order = sorted(range(len(coordinates)), key=coordinates.__getitem__)
            coordinates = [coordinates[i] for i in order]
            values = [values[i] for i in order]
            if stored is not None:
                stored = [stored[i] for i in order]
        return PointRows(run_key, coordinates, values, stored), blocks


def steps_digest(steps: Iterable[int]) -> str:
    """Return the MD5 hex digest of steps written in decimal and joined by commas (as the store digests them).

    :param steps: the steps, in order.
    """
    return hashlib.md5(",".join(map(str, steps)).encode(), usedforsecurity=False).hexdigest()
