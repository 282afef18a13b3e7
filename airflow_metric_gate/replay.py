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
import shlex
from collections import deque
from collections.abc import Iterable, Iterator, Mapping, Sequence
from itertools import chain, islice
from typing import Any

from airflow_metric_gate.api import load_declarations
from airflow_metric_gate.decision import policy_of
from airflow_metric_gate.declarations import GateDeclaration, collapse_duplicates
from airflow_metric_gate.enums import ERROR, STATUSES, RunStatus
from airflow_metric_gate.evaluation import DEFAULT_HISTORY_LIMIT, DEFAULT_MIN_HISTORY
from airflow_metric_gate.judging import judge_run
from airflow_metric_gate.pipeline import check_evaluate_options
from airflow_metric_gate.printable import printable_copy
from airflow_metric_gate.replay_calibrated import replay_calibrated
from airflow_metric_gate.replay_report import replay_summary
from airflow_metric_gate.rules import declaration_summary, rule_options
from airflow_metric_gate.store import MetricStore, RunRow, StoreInputError, StoreUnavailable, opened_store

TRUST_MODES = ("replayed", "stored")

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
    check_evaluate_options(history_limit=history_limit, min_history=min_history, aggregate=aggregate)
    warnings: list[str] = []
    if declarations is not None:
        declarations, warnings = collapse_duplicates(declarations)
    if trust not in TRUST_MODES:
        raise StoreInputError(f"trust must be one of {', '.join(TRUST_MODES)}, got {trust!r}")
    runs_and_blocks = store.series_runs_and_blocks(series, backend, suite)
    runs = [run for run, _ in runs_and_blocks]
    blocks_of = {run.run_id: blocks for run, blocks in runs_and_blocks}
    if not runs:
        stored = sorted({(r.backend, r.suite) for r in store.list_runs(series=series, limit=1000)})
        places = [f"--backend {shlex.quote(b)} --suite {shlex.quote(s)}" for b, s in stored[:5]]
        where = ("; it is stored under " + ", ".join(places)
                 + (f" and {len(stored) - 5} more" if len(stored) > 5 else "")) if stored else ""
        raise StoreInputError(
            f"the metric store has no run of series {series!r} (backend {backend!r}, suite {suite!r}); "
            f"nothing to replay{where}"
        )

    given = declarations is not None
    gates: dict[Any, _Gate] = {}
    # (metric_key, steps_key) -> keys of the given declarations judged on those stored coordinates
    routes: dict[tuple[str, str], list[Any]] = {}
    if declarations is not None:
        for d in declarations:
            key = (d.metric_key, d.steps_key, d.constraint_key)  # one declaration per coordinate (collapsed above)
            gates[key] = _Gate(declaration_summary(d))
            routes.setdefault((d.metric_key, d.steps_key), []).append(key)
    stored_literals: dict[str, set[str]] = {}
    # declaration -> step -> (fed-run numbers, baseline values): each coordinate's rolling window
    windows: dict[Any, dict[int, tuple[deque, deque]]] = {}
    fed = 0  # how many runs have fed baselines so far
    nights: list[dict] = []
    counts_total = {s: 0 for s in STATUSES}

    def replay_run(run: RunRow) -> dict:
        present: dict[Any, bool] = {}
        # what the run feeds if trusted: each value and its coordinate's window
        feed_windows: list[tuple[deque, deque]] = []
        feed_values: list[float] = []
        feed_window, feed_value = feed_windows.append, feed_values.append
        cutoff = fed - history_limit
        if not given:
            for summary in run.declarations:
                key = (summary["metric_key"], summary["steps_key"], summary["constraint_key"])
                gate = gates.get(key)
                if gate is None:
                    gate = gates[key] = _Gate(declaration_summary(summary))
                else:
                    gate.summary = declaration_summary(summary)
                present[key] = False

        def values() -> Iterator[tuple]:
            for metric_key, steps_key, constraint_key, n in blocks_of[run.run_id]:
                # one declaration's values (consecutive, in step order): resolve it once
                points: Iterable[tuple] = islice(stream, n)
                block = (metric_key, steps_key, constraint_key)
                stored_literals.setdefault(metric_key, set()).add(steps_key)
                keys = routes.get((metric_key, steps_key), ()) if given else (block,)
                # a value without its declaration (not written by this package) is skipped
                targets = [(gk, windows.setdefault(gk, {})) for gk in keys if gk in gates]
                if not targets:
                    deque(points, maxlen=0)  # read past them
                    continue
                if len(targets) > 1:
                    points = list(points)  # judged once per declaration routed to them
                for gk, gate_windows in targets:
                    present[gk] = True
                    window_of = gate_windows.get
                    for step, value, at_step in points:
                        if given:
                            coord = (gk, step)
                            if coord in feed_seen:
                                continue  # the same metric and steps stored under another constraint: same values
                            feed_seen.add(coord)
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

        errors: list[tuple[Any, int, str]] = []
        for e in run.selection_errors:
            stored_literals.setdefault(e["metric_key"], set()).add(e["steps_key"])
            targets: Iterable[Any]
            if given:
                targets = routes.get((e["metric_key"], e["steps_key"]), ())
            else:
                targets = ((e["metric_key"], e["steps_key"], e["constraint_key"]),)
            errors.extend((gk, 0, e["message"]) for gk in targets)
        judged_errors: list[tuple] = []

        def unjudged_errors() -> Iterator[tuple]:
            # a declaration judged on values of this night (under another constraint) has no selection error
            for gk, order, message in errors:
                if present.get(gk) is True or gk not in gates:
                    continue
                present[gk] = True
                judged_errors.append(gk)
                yield gk, order, message

        # every value and error is read in order: results sort stably (all order 0), per declaration
        judgement = judge_run(values(), {gk: g.summary for gk, g in gates.items()}, unjudged_errors(),
                              min_history=min_history, aggregate=aggregate)
        night: dict[str, Any] = {
            "run_id": run.run_id, "logical_date": run.logical_date.isoformat(), "role": run.role,
            "stored_status": run.status,
        }
        for gk, judged in present.items():
            if judged:
                gates[gk].judged += 1
        if given:
            for gk, gate in gates.items():
                if gk not in present:
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
            counts_total[s] += c
        return {"night": night, "feed": (feed_windows, feed_values), "trusted": judgement.trusted}

    def replay_group(group: Sequence[RunRow]) -> None:
        """Judge the runs of one logical date (they do not see each other), then feed baselines."""
        nonlocal fed
        if any(run.rebaseline for run in group):
            windows.clear()
        judged = []
        for run in group:
            feed_seen.clear()
            judged.append((run, replay_run(run)))
        for run, j in judged:
            nights.append(j["night"])
            trusted = j["trusted"] if trust == "replayed" else run.status == RunStatus.TRUSTED
            if run.role != "baseline" or not trusted:
                continue
            fed += 1
            for (fed_at, history), value in zip(*j["feed"]):
                fed_at.append(fed)
                history.append(value)

    feed_seen: set = set()
    # every value of the series in one ordered pass (the runs' order, then their keys), read as it is judged;
    # the runs' blocks say whose values they are
    fetched = 0

    def batches() -> Iterator[list[tuple]]:
        nonlocal fetched
        for rows in store.iter_series_point_batches(series, backend, suite):
            fetched += len(rows)
            yield rows

    stream = chain.from_iterable(batches())
    start = 0
    for i in range(1, len(runs) + 1):
        if i == len(runs) or runs[i].logical_date != runs[start].logical_date:
            replay_group(runs[start:i])
            start = i
    deque(stream, maxlen=0)  # ends the ordered pass (and its read transaction)
    if fetched != sum(n for blocks in blocks_of.values() for *_, n in blocks):
        # the two statements saw different nights: values would be judged against other coordinates
        raise StoreUnavailable(
            f"the stored nights of series {series!r} changed while replay read them (a night was written "
            "meanwhile); nothing is reported: run replay again"
        )

    not_replayable = []
    for gk, gate in list(gates.items()):
        if given and gate.judged == 0 and not gate.failed:
            s = gate.summary
            literals = sorted(stored_literals.get(s["metric_key"], ()))
            why = (f"steps literal {s['steps_key']} was never stored for {s['metric_key']} (stored: "
                   f"{', '.join(literals)}); a new steps literal re-keys its coordinates, so replay has no "
                   "values for it" if literals else f"metric {s['metric_key']} was never stored for this series")
            not_replayable.append({**s, "reason": why})
            del gates[gk]
    if given and not gates:  # no declaration could be replayed: no night was judged, none is trusted
        for n in nights:
            n["replayed_status"] = None
    judged_nights = [n for n in nights if n["replayed_status"] is not None]
    return {
        "series": series, "backend": backend, "suite": suite,
        "settings": {"declarations": "given" if given else "stored", "history_limit": history_limit,
                     "min_history": min_history, "aggregate": aggregate, "trust": trust},
        "nights": nights,
        "declarations": [g.to_dict() for g in gates.values()],
        "not_replayable": not_replayable,
        "warnings": warnings,
        "summary": replay_summary(nights, judged_nights, len(gates), counts_total),
    }


def _step(result: dict) -> str:
    if result["step"] is None:
        return "-"
    return f"last@{result['at_step']}" if result["step"] == -1 else str(result["step"])


def _describe(result: dict) -> str:
    if result["status"] == ERROR:
        return f"ERROR: {result['reason']}"
    if result["step"] is None or result["lo"] is None or result["current"] is None:  # a whole night's result
        return f"{result['status']} whole night: {result['reason']}"
    band = f"[{result['lo']:.6g}, {result['hi']:.6g}]"
    return f"{result['status']} step {_step(result)} {result['current']:.6g} vs {band}"


def render_replay(report: dict, *, max_coordinates: int = 5) -> str:
    """Return a replay report as text: per declaration its failing nights, then what changed.

    Control characters in stored names (series, metric keys, steps and constraint literals, run
    ids, reasons) are escaped (:func:`~airflow_metric_gate.printable.printable`), as in every report
    of the package: a stored key cannot start a line of its own.

    :param report: from :func:`replay`.
    :param max_coordinates: at most this many coordinates listed per night and declaration.
    """
    report = printable_copy(report)
    st = report["settings"]
    lines = [
        f"replay of series {report['series']} (backend {report['backend']}, suite {report['suite']}): "
        f"{report['summary']['nights']} night(s); declarations {st['declarations']}, history_limit "
        f"{st['history_limit']}, min_history {st['min_history']}, aggregate {st['aggregate']}, trust {st['trust']}",
    ]
    lines.extend(f"warning: {w}" for w in report.get("warnings", ()))
    for g in report["declarations"]:
        lines.append("")
        options = "".join(f" {k}={v:g}" if isinstance(v, float) else f" {k}={v}" for k, v in rule_options(g).items())
        lines.append(f"{g['metric_key']} steps={g['steps_key']} constraint={g['constraint_key']}{options}: "
                     f"{g['nights_failed']} of {g['nights_judged']} night(s) would fail"
                     + (f"; not stored on {g['nights_not_stored']} night(s)" if g.get("nights_not_stored") else ""))
        for f in g["failed"]:
            coords = ", ".join(_describe(r) for r in f["results"][:max_coordinates])
            more = len(f["results"]) - max_coordinates
            lines.append(f"  {f['logical_date']} {f['run_id']} (stored {f['stored_status']}): {coords}"
                         + (f" and {more} more" if more > 0 else ""))
    for g in report["not_replayable"]:
        lines.append("")
        lines.append(f"{g['metric_key']} steps={g['steps_key']}: not replayable: {g['reason']}")
    s = report["summary"]
    lines.append("")
    if st["declarations"] == "given" and not s.get("replayable_declarations", 1):
        lines.append(f"no declaration replayable: none of the {s['nights']} night(s) was judged "
                     f"(stored: {s['stored_untrusted']} untrusted)")
        return "\n".join(lines)
    lines.append(f"{s['would_fail']} of {s['nights']} night(s) would fail (stored: {s['stored_untrusted']} untrusted)")
    lines.append(f"newly failing (stored trusted): {', '.join(s['newly_failing']) or 'none'}")
    lines.append(f"no longer failing (stored untrusted): {', '.join(s['no_longer_failing']) or 'none'}")
    return "\n".join(lines)
