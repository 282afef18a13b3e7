"""Replay: re-judge the stored nights of a series identity with other declarations or settings.

Nothing is written.  The store is read with two statements whatever the number of nights or
coordinates (the runs of the series identity, then all their values in one ordered pass); each
coordinate keeps a rolling window of its baseline values in memory, and every value is judged by
the same rule functions as :func:`airflow_metric_gate.pipeline.evaluate`.

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

from collections import Counter, deque
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

from airflow_metric_gate.declarations import GateDeclaration, collapse_duplicates
from airflow_metric_gate.enums import ERROR, FAIL, STATUSES, RunStatus
from airflow_metric_gate.evaluation import (
    DEFAULT_HISTORY_LIMIT,
    DEFAULT_MIN_HISTORY,
    constraint_params,
    describe,
    error_result,
    is_trusted,
    judge,
    judge_night,
    night_result,
    step_z,
)
from airflow_metric_gate.pipeline import check_evaluate_options
from airflow_metric_gate.rules import (
    declaration_summary,
    mad_k,
    min_failing_steps,
    night_mean_k,
    rule_options,
    tolerate_isolated_failures,
)
from airflow_metric_gate.store import MetricStore, RunRow, StoreInputError

TRUST_MODES = ("replayed", "stored")

__all__ = ["TRUST_MODES", "render_replay", "replay"]


class _Gate:
    """One declaration being replayed and what it found."""

    __slots__ = ("summary", "params", "mad_k", "night_k", "failed", "judged", "missing")

    def __init__(self, summary: dict) -> None:
        self.summary = summary
        self.params = constraint_params(summary["constraint"])
        self.mad_k = mad_k(summary)
        self.night_k = night_mean_k(summary)  # the opt-in whole-night rule (None: off)
        self.failed: list[dict] = []
        self.judged = 0
        self.missing = 0

    def to_dict(self) -> dict:
        out = dict(self.summary)
        out.update(nights_judged=self.judged, nights_not_stored=self.missing,
                   nights_failed=len(self.failed), failed=self.failed)
        return out


def _by_run(rows: Iterable[tuple], runs: Sequence[RunRow]) -> Iterator[tuple[RunRow, list[tuple]]]:
    """Pair each run with its rows; ``rows`` come in the runs' order."""
    it = iter(rows)
    pending = next(it, None)
    for run in runs:
        mine = []
        while pending is not None and pending[0] == run.run_id:
            mine.append(pending)
            pending = next(it, None)
        yield run, mine


def replay(
    store: MetricStore,
    series: str,
    backend: str = "cuda",
    suite: str = "default",
    *,
    declarations: Sequence[GateDeclaration] | None = None,
    history_limit: int = DEFAULT_HISTORY_LIMIT,
    min_history: int = DEFAULT_MIN_HISTORY,
    aggregate: str = "mean",
    trust: str = "replayed",
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

    :param store: the metric store.
    :param series: the series name.
    :param backend: the backend.
    :param suite: the suite.
    :param declarations: declarations to judge with instead of the stored ones.
    :param history_limit: how many earlier trusted baseline runs form a baseline.
    :param min_history: fewer baseline values make a coordinate INACTIVE.
    :param aggregate: ``mean`` or ``median``.
    :param trust: ``replayed`` or ``stored``: which trust decides that a night feeds later baselines.
    :return: the report: ``settings``, ``nights`` (stored and replayed status of each night; the
        replayed status is ``None`` when none of the given declarations can be replayed),
        ``declarations`` (per declaration, the nights that would fail and their FAIL/ERROR
        results), ``not_replayable``, ``warnings`` and ``summary``.
    :raises StoreInputError: on bad settings or when the store has no run of the series identity.
    :raises DeclarationError: two given declarations of one coordinate differ.
    """
    check_evaluate_options(history_limit=history_limit, min_history=min_history, aggregate=aggregate)
    warnings: list[str] = []
    if declarations is not None:
        declarations, warnings = collapse_duplicates(declarations)
    if trust not in TRUST_MODES:
        raise StoreInputError(f"trust must be one of {', '.join(TRUST_MODES)}, got {trust!r}")
    runs = store.series_runs_in_order(series, backend, suite)
    if not runs:
        raise StoreInputError(
            f"the metric store has no run of series {series!r} (backend {backend!r}, suite {suite!r}); "
            "nothing to replay"
        )

    given = declarations is not None
    gates: dict[Any, _Gate] = {}
    # (metric_key, steps_key) -> keys of the given declarations judged on those stored coordinates
    routes: dict[tuple[str, str], list[Any]] = {}
    if given:
        for i, d in enumerate(declarations):
            gates[i] = _Gate(declaration_summary(d))
            routes.setdefault((d.metric_key, d.steps_key), []).append(i)
    stored_literals: dict[str, set[str]] = {}
    windows: dict[Any, tuple[deque, deque]] = {}  # coordinate -> (fed-run numbers, baseline values)
    fed = 0  # how many runs have fed baselines so far
    nights: list[dict] = []
    counts_total = {s: 0 for s in STATUSES}

    def judge_run(run: RunRow, rows: list[tuple]) -> dict:
        counts = {s: 0 for s in STATUSES}
        present: dict[Any, bool] = {}
        feed: list[tuple[Any, float]] = []
        failing: dict[Any, list] = {}
        selected: Counter = Counter()
        night_zs: dict[Any, list[float]] = {}  # the whole-night rule's robust z, per declaration
        cutoff = fed - history_limit
        if not given:
            for summary in run.declarations:
                key = (summary["metric_key"], summary["steps_key"], summary["constraint_key"])
                gate = gates.get(key)
                if gate is None:
                    gate = gates[key] = _Gate(declaration_summary(summary))
                else:
                    gate.summary, gate.params = declaration_summary(summary), constraint_params(summary["constraint"])
                    gate.mad_k = mad_k(summary)
                    gate.night_k = night_mean_k(summary)
                present[key] = False
        block: tuple[str, str, str] | None = None  # the declaration of the rows being read
        targets: list[tuple[Any, _Gate]] = []
        for _, metric_key, steps_key, constraint_key, step, value, at_step in rows:
            if block is None or block[2] != constraint_key or block[0] != metric_key or block[1] != steps_key:
                # a new declaration's rows (they come together, in ordinal order): resolve it once
                block = (metric_key, steps_key, constraint_key)
                stored_literals.setdefault(metric_key, set()).add(steps_key)
                keys = routes.get((metric_key, steps_key), ()) if given else (block,)
                # a value without its declaration (not written by this package) is skipped
                targets = [(gk, gates[gk]) for gk in keys if gk in gates]
                for gk, _ in targets:
                    present[gk] = True
            for gk, gate in targets:
                coord = (gk, step)
                if given:
                    if coord in feed_seen:
                        continue  # the same metric and steps stored under another constraint: same values
                    feed_seen.add(coord)
                window = windows.get(coord)
                if window is None:
                    history: Any = ()
                else:
                    fed_at, history = window  # when each value was fed, and the values
                    while fed_at and fed_at[0] <= cutoff:
                        fed_at.popleft()
                        history.popleft()
                judged = judge(value, history, gate.params, min_history, aggregate, gate.mad_k)
                status = judged[0]
                counts[status] += 1
                if gate.night_k is not None:
                    z = step_z(value, history, judged)
                    if z is not None:
                        night_zs.setdefault(gk, []).append(z)
                if status in (FAIL, ERROR):
                    s = gate.summary
                    result = describe(metric_key, s["steps_key"], s["constraint_key"], step, at_step, value,
                                      len(history), judged, s["constraint"], min_history, aggregate, gate.mad_k)
                    failing.setdefault(gk, []).append(result)
                selected[gk] += 1
                feed.append((coord, value))
        for e in run.selection_errors:
            stored_literals.setdefault(e["metric_key"], set()).add(e["steps_key"])
            if given:
                targets = routes.get((e["metric_key"], e["steps_key"]), ())
            else:
                targets = ((e["metric_key"], e["steps_key"], e["constraint_key"]),)
            for gk in targets:
                if present.get(gk) is True:
                    continue
                if gk not in gates:
                    continue
                present[gk] = True
                s = gates[gk].summary
                counts[ERROR] += 1
                failing.setdefault(gk, []).append(
                    error_result(e["metric_key"], s["steps_key"], s["constraint_key"], e["message"])
                )
        night = {
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
        for gk, results in failing.items():
            s = gates[gk].summary
            if min_failing_steps(s) != 1:  # the opt-in persistence rule, as in evaluation
                key = (s["metric_key"], s["steps_key"], s["constraint_key"])
                items = tolerate_isolated_failures([(None, r, s) for r in results], counts,
                                                   Counter({key: selected[gk]}), keep_tolerated=False)
                failing[gk] = [r for _, r, _ in items]
        for gk, zs in night_zs.items():  # after persistence, as in evaluation
            s = gates[gk].summary
            judged_night = judge_night(zs, gates[gk].night_k)  # type: ignore[arg-type]
            if judged_night is not None and judged_night[0] == FAIL:
                counts[FAIL] += 1
                failing.setdefault(gk, []).append(night_result(
                    s["metric_key"], s["steps_key"], s["constraint_key"], zs, judged_night, gates[gk].night_k))  # type: ignore[arg-type]
        for gk, results in failing.items():
            if results:
                gates[gk].failed.append({**night, "results": [r.to_dict() for r in results]})
        trusted = is_trusted(counts)
        night.update(replayed_status="trusted" if trusted else "untrusted",
                     counts={s: c for s, c in counts.items() if c})
        for s, c in counts.items():
            counts_total[s] += c
        return {"night": night, "feed": feed, "trusted": trusted}

    group: list[tuple[RunRow, list[tuple]]] = []

    def close_group() -> None:
        nonlocal fed
        if any(run.rebaseline for run, _ in group):
            windows.clear()
        judged = []
        for run, rows in group:
            feed_seen.clear()
            judged.append((run, judge_run(run, rows)))
        for run, j in judged:
            nights.append(j["night"])
            trusted = j["trusted"] if trust == "replayed" else run.status == RunStatus.TRUSTED
            if run.role != "baseline" or not trusted:
                continue
            fed += 1
            for coord, value in j["feed"]:
                window = windows.get(coord)
                if window is None:
                    window = windows[coord] = (deque(maxlen=history_limit), deque(maxlen=history_limit))
                window[0].append(fed)
                window[1].append(value)
        group.clear()

    feed_seen: set = set()
    for run, rows in _by_run(store.iter_series_values(series, backend, suite), runs):
        if group and group[0][0].logical_date != run.logical_date:
            close_group()
        group.append((run, rows))
    close_group()

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
    changed_fail = [n["run_id"] for n in judged_nights
                    if n["stored_status"] == "trusted" and n["replayed_status"] != "trusted"]
    changed_pass = [n["run_id"] for n in judged_nights
                    if n["stored_status"] == "untrusted" and n["replayed_status"] == "trusted"]
    return {
        "series": series, "backend": backend, "suite": suite,
        "settings": {"declarations": "given" if given else "stored", "history_limit": history_limit,
                     "min_history": min_history, "aggregate": aggregate, "trust": trust},
        "nights": nights,
        "declarations": [g.to_dict() for g in gates.values()],
        "not_replayable": not_replayable,
        "warnings": warnings,
        "summary": {
            "nights": len(nights),
            "replayable_declarations": len(gates),
            "would_fail": sum(n["replayed_status"] != "trusted" for n in judged_nights),
            "stored_untrusted": sum(n["stored_status"] == "untrusted" for n in nights),
            "newly_failing": changed_fail,
            "no_longer_failing": changed_pass,
            "counts": {s: c for s, c in counts_total.items() if c},
        },
    }


def _step(result: dict) -> str:
    if result["step"] is None:
        return "-"
    return f"last@{result['at_step']}" if result["step"] == -1 else str(result["step"])


def _describe(result: dict) -> str:
    if result["status"] == ERROR:
        return f"ERROR: {result['reason']}"
    band = f"[{result['lo']:.6g}, {result['hi']:.6g}]"
    return f"{result['status']} step {_step(result)} {result['current']:.6g} vs {band}"


def render_replay(report: dict, *, max_coordinates: int = 5) -> str:
    """Return a replay report as text: per declaration its failing nights, then what changed.

    :param report: from :func:`replay`.
    :param max_coordinates: at most this many coordinates listed per night and declaration.
    """
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
