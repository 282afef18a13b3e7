"""Replay: re-judge the stored nights of a series identity with other declarations or settings.

Nothing is written.  The store is read with two statements whatever the number of nights or
coordinates (the runs of the series identity with the blocks of their values, then all their
values in one ordered pass); each coordinate keeps a rolling window of its baseline values in
memory, and each night is judged by the function :func:`airflow_metric_gate.pipeline.evaluate`
judges a run with (:func:`airflow_metric_gate.judging.judge_run`).

The baseline of a night under replay follows the store's rule (SPEC 6): the values of the
``history_limit`` most recent earlier ``baseline`` runs that are trusted, not before the latest
rebaseline marker.  Which runs count as trusted is the ``trust`` setting:

* ``replayed`` (default): a night feeds later baselines when it is trusted *under replay* (no FAIL
  or ERROR with the replayed declarations and settings), which is what the settings would have
  done had they been in force all along.  Stored statuses, including runs marked by hand, are only
  compared with, never used.
* ``stored``: a night feeds later baselines when its stored status is ``trusted``, as the store
  decided at the time (or a person marked it since); the baselines are then those that real
  evaluations saw, and only the judging changes.
"""

from __future__ import annotations

import os
from collections import deque
from collections.abc import Iterable, Iterator, Mapping, Sequence
from itertools import chain, islice
from typing import Any

from airflow_metric_gate.api import load_declarations
from airflow_metric_gate.decision import policy_of
from airflow_metric_gate.declarations import GateDeclaration
from airflow_metric_gate.enums import STATUSES, RunStatus
from airflow_metric_gate.evaluation import DEFAULT_HISTORY_LIMIT, DEFAULT_MIN_HISTORY
from airflow_metric_gate.judging import judge_run
from airflow_metric_gate.replay_calibrated import replay_calibrated
from airflow_metric_gate.replay_reading import (
    TRUST_MODES,
    by_logical_date,
    changed_while_read,
    checked_declarations,
    routes,
    series_nights,
)
from airflow_metric_gate.replay_report import render_replay, replay_summary
from airflow_metric_gate.rules import declaration_summary
from airflow_metric_gate.store import MetricStore, RunRow, opened_store

__all__ = ["TRUST_MODES", "render_replay", "replay"]


class _Gate:
    """One declaration being replayed and what it found."""

    __slots__ = ("summary", "failed", "judged", "missing")

    def __init__(self, summary: dict) -> None:
        self.summary = summary
        self.failed: list[dict] = []
        self.judged = 0
        self.missing = 0

    def to_dict(self) -> dict:
        out = dict(self.summary)
        out.update(nights_judged=self.judged, nights_not_stored=self.missing,
                   nights_failed=len(self.failed), failed=self.failed)
        return out


def replay(
    store: str | MetricStore | None,
    series: str,
    backend: str = "cuda",
    suite: str = "default",
    *,
    declarations: str | os.PathLike | Sequence[Mapping[str, Any] | GateDeclaration] | None = None,
    history_limit: int = DEFAULT_HISTORY_LIMIT,
    min_history: int = DEFAULT_MIN_HISTORY,
    aggregate: str = "mean",
    trust: str = "replayed",
    policy: str | None = None,
) -> dict:
    """Re-judge every stored night of a series identity in logical-date order; write nothing.

    Without ``declarations`` each night is judged with the declarations stored with it.  With
    ``declarations`` each one is judged on the stored coordinates of the same metric and the same
    steps literal (``steps_key``), whatever constraint they were stored under; a declaration whose
    metric and steps literal were never stored cannot be replayed and is listed under
    ``not_replayable``.  A coordinate given twice is judged once, under the same check as in
    evaluation (:func:`~airflow_metric_gate.declarations.collapse_duplicates`): identical
    declarations are collapsed with a warning (``warnings`` in the report), declarations that
    differ are bad input.  Nights run in logical-date order; nights with the same logical date do
    not see each other (as in evaluation).

    :param store: a store URL (``sqlite:///...``, ``postgresql://...``), opened for reading and
        closed by the call (a SQLite file must exist), or an open store (left open); ``None``:
        ``$METRIC_GATE_STORE``, else the embedded default.
    :param series: the series name.
    :param backend: the backend.
    :param suite: the suite.
    :param declarations: declarations to judge with instead of the stored ones: anything
        :func:`~airflow_metric_gate.api.load_declarations` accepts (a gates file, a list of
        mappings or of resolved declarations).
    :param history_limit: how many earlier trusted baseline runs form a baseline.
    :param min_history: fewer baseline values make a coordinate INACTIVE.
    :param aggregate: ``mean`` or ``median``.
    :param trust: ``replayed`` or ``stored``: which trust decides that a night feeds later baselines.
    :param policy: ``reference`` or ``calibrated`` for the declarations that set no policy (given or
        stored); ``None``: as they are.  A night with a calibrated declaration is judged by the very
        functions evaluate uses (:func:`~airflow_metric_gate.decision.calibrated.choose_history`,
        :func:`~airflow_metric_gate.judging.judge_calibrated`), nights and values held in memory.
    :return: the report: ``settings``, ``nights`` (stored and replayed status of each night; the
        replayed status is ``None`` when none of the given declarations can be replayed),
        ``declarations`` (per declaration, the nights that would fail and their FAIL/ERROR
        results), ``not_replayable``, ``warnings`` and ``summary``.
    :raises StoreInputError: on bad settings, a SQLite file that does not exist, or when the store
        has no run of the series identity.
    :raises DeclarationError: a given declaration is invalid, or two of one coordinate differ.
    :raises TypeError: ``store`` is neither a URL nor an open store, or ``declarations`` is no
        source of declarations.
    :raises StoreUnavailable: the store cannot be reached, or a night of the series was written
        while replay read it (its two reads disagree; nothing is reported): run it again.
    """
    if declarations is not None:
        declarations = load_declarations(declarations, policy=policy)
    with opened_store(store, read_only=True) as opened:
        if _any_calibrated(opened, series, backend, suite, declarations, policy):
            return replay_calibrated(opened, series, backend, suite, declarations=declarations,
                                     history_limit=history_limit, min_history=min_history, aggregate=aggregate,
                                     trust=trust, policy=policy)
        return _replay(opened, series, backend, suite, declarations=declarations, history_limit=history_limit,
                       min_history=min_history, aggregate=aggregate, trust=trust)


def _any_calibrated(store: MetricStore, series: str, backend: str, suite: str,
                    declarations: Sequence[GateDeclaration] | None, policy: str | None) -> bool:
    if declarations is not None:
        return any(d.policy == "calibrated" for d in declarations)
    if policy == "calibrated":
        return True
    return any(policy_of(d) == "calibrated" for run in store.list_runs(series=series, backend=backend, suite=suite,
                                                                        limit=100_000) for d in run.declarations)


def _replay(
    store: MetricStore,
    series: str,
    backend: str,
    suite: str,
    *,
    declarations: Sequence[GateDeclaration] | None,
    history_limit: int,
    min_history: int,
    aggregate: str,
    trust: str,
) -> dict:
    declarations, warnings = checked_declarations(declarations, history_limit=history_limit,
                                                  min_history=min_history, aggregate=aggregate, trust=trust)
    replayer = _Replay(store, series, backend, suite, declarations, history_limit=history_limit,
                       min_history=min_history, aggregate=aggregate, trust=trust)
    return replayer.report(warnings)


class _NightFeed:
    """What one night is judged on and, if it is trusted, feeds later baselines."""

    __slots__ = ("present", "windows", "values", "cutoff", "seen")

    def __init__(self, cutoff: int) -> None:
        self.present: dict[Any, bool] = {}  # declaration -> judged on values of this night (not only an error)
        self.windows: list[tuple[deque, deque]] = []  # each value's coordinate window ...
        self.values: list[float] = []  # ... and the value
        self.cutoff = cutoff  # a window value fed at or before this fed-run number is out of the history
        self.seen: set = set()  # (declaration, step) already judged (given declarations)


class _Replay:
    """The reference replay of one series identity: every value read once, in order, as it is judged.

    Each coordinate keeps a rolling window of its baseline values; a night feeds the windows once the
    nights of its logical date are judged, if it is a trusted baseline night (by ``trust``).
    """

    def __init__(self, store: MetricStore, series: str, backend: str, suite: str,
                 declarations: Sequence[GateDeclaration] | None, *, history_limit: int, min_history: int,
                 aggregate: str, trust: str) -> None:
        self.store, self.series, self.backend, self.suite = store, series, backend, suite
        self.history_limit, self.min_history, self.aggregate, self.trust = history_limit, min_history, aggregate, trust
        runs_and_blocks = series_nights(store, series, backend, suite)
        self.runs = [run for run, _ in runs_and_blocks]
        self.blocks_of = {run.run_id: blocks for run, blocks in runs_and_blocks}
        self.given = declarations is not None
        self.gates: dict[Any, _Gate] = {}
        for d in declarations or ():  # one declaration per coordinate (collapsed by checked_declarations)
            self.gates[(d.metric_key, d.steps_key, d.constraint_key)] = _Gate(declaration_summary(d))
        self.routes = routes(self.gates)  # (metric_key, steps_key) -> the given declarations judged there
        self.stored_literals: dict[str, set[str]] = {}
        # declaration -> step -> (fed-run numbers, baseline values): each coordinate's rolling window
        self.windows: dict[Any, dict[int, tuple[deque, deque]]] = {}
        self.fed = 0  # how many runs have fed baselines so far
        self.nights: list[dict] = []
        self.counts_total = {s: 0 for s in STATUSES}
        self.fetched = 0
        # every value of the series in one ordered pass (the runs' order, then their keys), read as it is
        # judged; the runs' blocks say whose values they are
        self.stream = chain.from_iterable(self._batches())

    def _batches(self) -> Iterator[list[tuple]]:
        for rows in self.store.iter_series_point_batches(self.series, self.backend, self.suite):
            self.fetched += len(rows)
            yield rows

    def report(self, warnings: list[str]) -> dict:
        """Judge every night; return the replay report.

        :param warnings: the warnings of the given declarations.
        """
        for group in by_logical_date(self.runs, lambda run: run.logical_date):
            self._judge_group(group)
        deque(self.stream, maxlen=0)  # ends the ordered pass (and its read transaction)
        if self.fetched != sum(n for blocks in self.blocks_of.values() for *_, n in blocks):
            # the two statements saw different nights: values would be judged against other coordinates
            raise changed_while_read(self.series)
        not_replayable = self._not_replayable()
        nights = self.nights
        if self.given and not self.gates:  # no declaration could be replayed: no night was judged, none trusted
            for n in nights:
                n["replayed_status"] = None
        judged_nights = [n for n in nights if n["replayed_status"] is not None]
        return {
            "series": self.series, "backend": self.backend, "suite": self.suite,
            "settings": {"declarations": "given" if self.given else "stored", "history_limit": self.history_limit,
                         "min_history": self.min_history, "aggregate": self.aggregate, "trust": self.trust},
            "nights": nights,
            "declarations": [g.to_dict() for g in self.gates.values()],
            "not_replayable": not_replayable,
            "warnings": warnings,
            "summary": replay_summary(nights, judged_nights, len(self.gates), self.counts_total),
        }

    def _judge_group(self, group: Sequence[RunRow]) -> None:
        """Judge the runs of one logical date (they do not see each other), then feed baselines."""
        if any(run.rebaseline for run in group):
            self.windows.clear()
        judged = [(run, *self._judge_night(run)) for run in group]
        for run, night, feed, trusted_now in judged:
            self.nights.append(night)
            trusted = trusted_now if self.trust == "replayed" else run.status == RunStatus.TRUSTED
            if run.role != "baseline" or not trusted:
                continue
            self.fed += 1
            for (fed_at, history), value in zip(feed.windows, feed.values):
                fed_at.append(self.fed)
                history.append(value)

    def _judge_night(self, run: RunRow) -> tuple[dict, _NightFeed, bool]:
        """Judge one night: its report entry, what it would feed, and whether it is trusted under replay."""
        feed = _NightFeed(self.fed - self.history_limit)
        gates = self.gates
        if not self.given:
            for summary in run.declarations:
                key = (summary["metric_key"], summary["steps_key"], summary["constraint_key"])
                gate = gates.get(key)
                if gate is None:
                    gates[key] = _Gate(declaration_summary(summary))
                else:
                    gate.summary = declaration_summary(summary)
                feed.present[key] = False
        errors = self._errors(run)
        # every value and error is read in order: results sort stably (all order 0), per declaration
        judgement = judge_run(self._values(run, feed), {gk: g.summary for gk, g in gates.items()},
                              self._unjudged(errors, feed), min_history=self.min_history,
                              aggregate=self.aggregate)
        night: dict[str, Any] = {
            "run_id": run.run_id, "logical_date": run.logical_date.isoformat(), "role": run.role,
            "stored_status": run.status,
        }
        for gk, judged in feed.present.items():
            if judged:
                gates[gk].judged += 1
        if self.given:
            for gk, gate in gates.items():
                if gk not in feed.present:
                    gate.missing += 1
        failing: dict[Any, list] = {}
        for _, result, summary in judgement.results:
            failing.setdefault((summary["metric_key"], summary["steps_key"], summary["constraint_key"]), []).append(
                result
            )
        for gk, results in failing.items():
            gates[gk].failed.append({**night, "results": [r.to_dict() for r in results]})
        counts = judgement.counts
        night.update(replayed_status="trusted" if judgement.trusted else "untrusted",
                     counts={s: c for s, c in counts.items() if c})
        for s, c in counts.items():
            self.counts_total[s] += c
        return night, feed, judgement.trusted

    def _values(self, run: RunRow, feed: _NightFeed) -> Iterator[tuple]:
        """Yield the night's values, each with the baseline window of its declaration's coordinate."""
        given, history_limit, cutoff = self.given, self.history_limit, feed.cutoff
        feed_window, feed_value = feed.windows.append, feed.values.append
        for metric_key, steps_key, constraint_key, n in self.blocks_of[run.run_id]:
            # one declaration's values (consecutive, in step order): resolve it once
            points: Iterable[tuple] = islice(self.stream, n)
            block = (metric_key, steps_key, constraint_key)
            self.stored_literals.setdefault(metric_key, set()).add(steps_key)
            keys = self.routes.get((metric_key, steps_key), ()) if given else (block,)
            # a value without its declaration (not written by this package) is skipped
            targets = [(gk, self.windows.setdefault(gk, {})) for gk in keys if gk in self.gates]
            if not targets:
                deque(points, maxlen=0)  # read past them
                continue
            if len(targets) > 1:
                points = list(points)  # judged once per declaration routed to them
            for gk, gate_windows in targets:
                feed.present[gk] = True
                window_of = gate_windows.get
                for step, value, at_step in points:
                    if given:
                        coord = (gk, step)
                        if coord in feed.seen:
                            continue  # the same metric and steps stored under another constraint: same values
                        feed.seen.add(coord)
                    window = window_of(step)
                    if window is None:
                        window = gate_windows[step] = (deque(maxlen=history_limit), deque(maxlen=history_limit))
                    fed_at, history = window  # when each value was fed, and the values
                    if fed_at and fed_at[0] <= cutoff:
                        while fed_at and fed_at[0] <= cutoff:  # fed before the last history_limit fed runs
                            fed_at.popleft()
                            history.popleft()
                    feed_window(window)
                    feed_value(value)
                    yield gk, step, at_step, value, 0, history

    def _errors(self, run: RunRow) -> list[tuple[Any, int, str]]:
        """The night's selection errors, each with the declaration it is routed to."""
        errors: list[tuple[Any, int, str]] = []
        for e in run.selection_errors:
            self.stored_literals.setdefault(e["metric_key"], set()).add(e["steps_key"])
            targets: Iterable[Any]
            if self.given:
                targets = self.routes.get((e["metric_key"], e["steps_key"]), ())
            else:
                targets = ((e["metric_key"], e["steps_key"], e["constraint_key"]),)
            errors.extend((gk, 0, e["message"]) for gk in targets)
        return errors

    def _unjudged(self, errors: list[tuple[Any, int, str]], feed: _NightFeed) -> Iterator[tuple]:
        """Yield the selection errors of the declarations judged on no value of the night (read after its values)."""
        # a declaration judged on values of this night (under another constraint) has no selection error
        for gk, order, message in errors:
            if feed.present.get(gk) is True or gk not in self.gates:
                continue
            feed.present[gk] = True
            yield gk, order, message

    def _not_replayable(self) -> list[dict]:
        """Take the given declarations that no night could judge out of the report; say why for each."""
        not_replayable = []
        for gk, gate in list(self.gates.items()):
            if self.given and gate.judged == 0 and not gate.failed:
                s = gate.summary
                literals = sorted(self.stored_literals.get(s["metric_key"], ()))
                why = (f"steps literal {s['steps_key']} was never stored for {s['metric_key']} (stored: "
                       f"{', '.join(literals)}); a new steps literal re-keys its coordinates, so replay has no "
                       "values for it" if literals else f"metric {s['metric_key']} was never stored for this series")
                not_replayable.append({**s, "reason": why})
                del self.gates[gk]
        return not_replayable
