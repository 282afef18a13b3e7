"""What the "Metric gate" UI shows, built from a verdict and store rows (no Airflow, no HTML).

The pages and charts are drawn from the plain structures these functions return, so the same data
can be checked in tests without a browser or an Airflow database.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from airflow_metric_gate.evaluation import ERROR, FAIL, INACTIVE, PASS, STATUSES, evaluate_value
from airflow_metric_gate.report import change_text
from airflow_metric_gate.rules import mad_k
from airflow_metric_gate.verdict import band_distance

#: How the runs of a series are drawn: one kind per point.
KIND_TONIGHT = "tonight"
KIND_TRUSTED = "trusted"
KIND_UNTRUSTED = "untrusted"
KIND_PENDING = "pending"
KIND_SHADOW = "shadow"


def _declaration_key(result: Mapping) -> tuple[str, str, str]:
    return result["metric_key"], result["steps_key"], result["constraint_key"]


def summary_from_results(results: Sequence[Mapping]) -> list[dict]:
    """Build the per-declaration summary from a verdict's listed results (when it carries none).

    Only the listed results count, so ``PASS`` and ``INACTIVE`` are ``None`` (unknown here): the
    verdict lists FAIL and ERROR results only.  Same shape and order as the verdict's ``summary``:
    declarations with a FAIL first, by their worst distance (largest first), then those with an ERROR.

    :param results: the verdict's ``results``.
    """
    entries: dict[tuple[str, str, str], dict] = {}
    for r in results:
        if r["status"] not in (FAIL, ERROR):
            continue
        key = _declaration_key(r)
        entry = entries.get(key)
        if entry is None:
            entry = entries[key] = {
                "metric_key": key[0], "steps_key": key[1], "constraint_key": key[2],
                "counts": {PASS: None, FAIL: 0, INACTIVE: None, ERROR: 0},
                "first_failing_step": None, "last_failing_step": None, "side": None, "worst": None, "error": None,
            }
        entry["counts"][r["status"]] += 1
        if r["status"] == ERROR:
            entry["error"] = entry["error"] or r.get("reason")
            continue
        step = r["at_step"] if r.get("at_step") is not None else r["step"]
        if step is not None:
            first, last = entry["first_failing_step"], entry["last_failing_step"]
            entry["first_failing_step"] = step if first is None else min(first, step)
            entry["last_failing_step"] = step if last is None else max(last, step)
        sides = {entry["side"], r["side"]} - {None}
        entry["side"] = sides.pop() if len(sides) == 1 else "both"
        distance = band_distance(r["current"], r["ref"], r["lo"], r["hi"])
        if entry["worst"] is None or distance > entry["worst"]["distance"]:
            entry["worst"] = {
                "step": r["step"], "at_step": r.get("at_step"), "current": r["current"], "ref": r["ref"],
                "lo": r["lo"], "hi": r["hi"], "side": r["side"], "bound": r["bound"], "distance": distance,
            }
    return sorted(
        entries.values(),
        key=lambda e: (e["worst"] is None, -e["worst"]["distance"] if e["worst"] is not None else 0.0),
    )


def verdict_summary(verdict: Mapping) -> tuple[list[dict], bool]:
    """Return a verdict's per-declaration summary, and whether it came from the verdict itself.

    :param verdict: a verdict (``verdict/v1``).
    """
    summary = verdict.get("summary")
    if isinstance(summary, list):
        return list(summary), True
    return summary_from_results(verdict.get("results", [])), False


def steps_label(steps_key: str) -> str:
    """Return a declaration's steps key as written (``all`` rather than the canonical JSON ``"all"``).

    :param steps_key: canonical JSON of the steps literal.
    """
    try:
        value = json.loads(steps_key)
    except ValueError:
        return steps_key
    return value if isinstance(value, str) else steps_key


def _num(x: float | None) -> str:
    return "-" if x is None else f"{x:.6g}"


def summary_text(entry: Mapping) -> str:
    """Return one summary entry as the sentence on-call reads first.

    ``rollout/raw_reward (steps all): 80 FAIL from step 120 to 199, below the band; worst at step 150:
    0.61 vs baseline 1.02 (change -40%; band 0.918..1.12)``: the same "by how much" as the task log
    (the change of the worst step against its baseline)

    :param entry: one entry of the verdict's ``summary``.
    """
    counts = entry["counts"]
    head = f"{entry['metric_key']} (steps {steps_label(entry['steps_key'])})"
    parts = []
    if counts.get(FAIL):
        first, last = entry.get("first_failing_step"), entry.get("last_failing_step")
        where = ""
        if first is not None and last is not None:
            where = f" at step {first}" if first == last else f" from step {first} to {last}"
        side = entry.get("side")
        calibrated = entry.get("calibrated_night")  # the calibrated policy's night: one result, not a step
        steps_failed = counts[FAIL] - (1 if calibrated else 0)
        text = f"{steps_failed} FAIL{where}" + (f", {side} the band" if side in ("above", "below") else "")
        worst = entry.get("worst")
        if worst:
            step = worst["at_step"] if worst.get("at_step") is not None else worst["step"]
            text += (
                f"; worst at step {step}: {_num(worst['current'])} vs baseline {_num(worst['ref'])} "
                f"(change {change_text(worst['current'], worst['ref'])}; band {_num(worst['lo'])}..{_num(worst['hi'])})"
            )
        night = entry.get("night")  # the whole night's FAIL (opt-in night_mean_k)
        if night:
            text += (f"; whole night {night['side']} its band: {_num(night['statistic'])} vs "
                     f"-+{_num(night['night_mean_k'])} (night_mean_k, {night['steps']} steps)")
        if calibrated:
            text += f"; {calibrated['reason']}"
        parts.append(text)
    if counts.get(ERROR):
        parts.append(f"{counts[ERROR]} ERROR" + (f": {entry['error']}" if entry.get("error") else ""))
    return f"{head}: " + "; ".join(parts)


def worst_failures(results: Sequence[Mapping], entry: Mapping, limit: int) -> list[dict]:
    """Return a declaration's FAIL results, worst first, at most ``limit``.

    :param results: the verdict's ``results``.
    :param entry: the declaration's summary entry.
    :param limit: how many.
    """
    key = _declaration_key(entry)
    fails = [r for r in results if r["status"] == FAIL and _declaration_key(r) == key]
    fails.sort(key=lambda r: -band_distance(r["current"], r["ref"], r["lo"], r["hi"]))
    return [dict(r) for r in fails[:limit]]


_REASON_COUNT = re.compile(r"(\d+) (PASS|FAIL|INACTIVE|ERROR)\b")


def status_counts(status_reason: str | None) -> dict[str, int] | None:
    """Return the evaluation's counts kept in a run's ``status_reason`` (``"9 PASS, 1 FAIL"``).

    A hand mark from the UI keeps them in front (``"9 PASS, 1 FAIL; marked trusted by ..."``).

    :param status_reason: the run's ``status_reason``; ``None``, or a note without counts (a mark
        from the command line), gives ``None``.
    """
    if not status_reason or status_reason.startswith("marked "):
        return None
    found = _REASON_COUNT.findall(status_reason.split("; marked ", 1)[0])
    if not found:
        return None
    counts = {status: 0 for status in STATUSES}
    for number, status in found:
        counts[status] = int(number)
    return counts


@dataclass(frozen=True)
class Point:
    """One night of a coordinate's history, as a chart draws it."""

    run_id: str
    logical_date: datetime
    value: float
    kind: str
    status: str
    role: str


def point_kind(role: str, status: str, *, tonight: bool = False) -> str:
    """Return how a run's point is drawn: tonight, shadow, or by trust status.

    :param role: ``baseline`` or ``shadow``.
    :param status: ``pending``, ``trusted`` or ``untrusted``.
    :param tonight: the run the page is about.
    """
    if tonight:
        return KIND_TONIGHT
    if role == "shadow":
        return KIND_SHADOW
    return {"trusted": KIND_TRUSTED, "untrusted": KIND_UNTRUSTED}.get(status, KIND_PENDING)


def history_points(rows: Iterable[Mapping], tonight_run_id: str | None = None) -> list[Point]:
    """Turn :meth:`~airflow_metric_gate.store.MetricStore.coordinate_history` rows into chart points.

    :param rows: the history rows, oldest first.
    :param tonight_run_id: the store run id to highlight.
    """
    return [
        Point(
            run_id=r["run_id"], logical_date=r["logical_date"], value=float(r["value"]),
            kind=point_kind(r["role"], r["status"], tonight=r["run_id"] == tonight_run_id),
            status=r["status"], role=r["role"],
        )
        for r in rows
    ]


def step_band(current_by_step: Mapping[int, float], values_by_step: Mapping[int, Sequence[float]],
              gate: Mapping[str, Any], *, aggregate: str = "mean",
              min_history: int = 1) -> dict[int, tuple[float, float, float]]:
    """Return ``{step: (ref, lo, hi)}``: the band each of a run's steps is judged against.

    Each step is judged by the judging function itself
    (:func:`~airflow_metric_gate.evaluation.evaluate_value`) with the declaration as it is stored,
    its opt-in options included (``band: mad``), so the band drawn is the band that decides.

    :param current_by_step: the run's value of each step.
    :param values_by_step: the baseline values of each step.
    :param gate: the declaration as stored with the run (``constraint`` and its opt-in options).
    :param aggregate: ``mean`` or ``median``.
    :param min_history: steps with fewer baseline values get no band (cold start).
    """
    k = mad_k(gate)
    out = {}
    for step, values in values_by_step.items():
        current = current_by_step.get(step)
        if current is None:
            continue
        r = evaluate_value(
            metric_key=gate["metric_key"], steps_key=gate["steps_key"], constraint_key=gate["constraint_key"],
            step=step, at_step=step, current=current, history=values, constraint=gate["constraint"],
            min_history=min_history, aggregate=aggregate, mad_k=k,
        )
        if r.ref is not None and r.lo is not None and r.hi is not None:
            out[step] = (r.ref, r.lo, r.hi)
    return out


#: The night outcomes that need attention, worst first (``runs.outcomes``: the reference policy's
#: ``fail``/``error``, the calibrated policy's ``shift`` and ``drift`` too).
ATTENTION_OUTCOMES = ("error", "fail", "shift", "drift", "drift-continues", "blowup")


def outcome_key(metric_key: str, steps_key: str, constraint_key: str) -> str:
    """Return the key of a declaration in a run's ``outcomes`` (as the store writes it).

    :param metric_key: the metric.
    :param steps_key: the steps key.
    :param constraint_key: the constraint key.
    """
    return json.dumps([metric_key, steps_key, constraint_key])


def night_outcome(run: Any, key: tuple[str, str, str]) -> str:
    """Return how one declaration's night went: its stored outcome, else the run's status.

    :param run: a store run (``outcomes``, ``status``).
    :param key: the declaration.
    """
    found = (getattr(run, "outcomes", None) or {}).get(outcome_key(*key))
    if isinstance(found, Mapping) and isinstance(found.get("o"), str):
        return found["o"]
    return {"pending": "pending"}.get(run.status, "none")


def overview_grid(runs: Sequence[Any], declarations: Sequence[Mapping]) -> list[tuple[Any, list[str]]]:
    """Return the series overview: one row per night (newest first), one outcome per declaration.

    :param runs: the page's runs, newest first.
    :param declarations: the columns (the newest run's declarations).
    """
    keys = [(d["metric_key"], d["steps_key"], d["constraint_key"]) for d in declarations]
    return [(run, [night_outcome(run, key) for key in keys]) for run in runs]


def regressed_declaration(runs: Sequence[Any], declarations: Sequence[Mapping]) -> tuple[Any, dict] | None:
    """Return the newest night with a declaration that needs attention, and that declaration (worst outcome).

    :param runs: runs, newest first.
    :param declarations: the declarations to look at.
    """
    rank = {o: i for i, o in enumerate(ATTENTION_OUTCOMES)}
    for run in runs:
        worst = None
        for d in declarations:
            outcome = night_outcome(run, (d["metric_key"], d["steps_key"], d["constraint_key"]))
            if outcome in rank and (worst is None or rank[outcome] < worst[0]):
                worst = (rank[outcome], dict(d))
        if worst is not None:
            return run, worst[1]
    return None


def worst_step(current_by_step: Mapping[int, float], bands: Mapping[int, tuple[float, float, float]]) -> int | None:
    """Return the step farthest outside its band (``None`` when every step is inside).

    :param current_by_step: the night's value of each step.
    :param bands: ``{step: (ref, lo, hi)}`` (:func:`step_band`).
    """
    distances = {s: band_distance(v, *bands[s]) for s, v in current_by_step.items() if s in bands}
    distances = {s: d for s, d in distances.items() if d > 0}
    return max(distances, key=distances.__getitem__) if distances else None


#: What a declaration's night chart measures: the calibrated policy's night statistic, or the
#: reference policy's worst distance outside a step's band.
MEASURE_Z = "z"
MEASURE_DISTANCE = "distance"


@dataclass(frozen=True)
class NightPoint:
    """One night of a declaration, as its night chart draws it.

    ``lo``/``hi`` is the band the night was judged with (``None``: not kept for that night).
    """

    run_id: str
    logical_date: datetime
    outcome: str
    value: float
    lo: float | None
    hi: float | None


def night_points(runs: Sequence[Any], key: tuple[str, str, str]) -> tuple[str, list[NightPoint]]:
    """Return a declaration's nights from the runs' stored outcomes, oldest first, and what they measure.

    Under the calibrated policy a night's outcome keeps ``z`` (the night statistic) and ``q`` (its band
    ``-q..q``); under the reference policy it keeps ``d``, the worst distance outside a step's band
    (0 inside, relative to the step's baseline).  The measure is ``z`` when the newest night that
    kept one is calibrated; nights that kept no value of that measure (cold start, an error, outcomes
    stored before it was kept) are left out.

    :param runs: store runs (their ``outcomes``), in any order.
    :param key: the declaration.
    """
    found = []
    for run in runs:
        o = (getattr(run, "outcomes", None) or {}).get(outcome_key(*key))
        if isinstance(o, Mapping):
            found.append((run, o))
    found.sort(key=lambda x: (x[0].logical_date, x[0].run_id))
    measure = MEASURE_DISTANCE
    for _, o in reversed(found):
        if isinstance(o.get("z"), (int, float)):
            measure = MEASURE_Z
            break
        if isinstance(o.get("d"), (int, float)):
            break
    points = []
    for run, o in found:
        if measure == MEASURE_Z and isinstance(o.get("z"), (int, float)):
            q = o.get("q")
            lo, hi = (-float(q), float(q)) if isinstance(q, (int, float)) else (None, None)
            points.append(NightPoint(run.run_id, run.logical_date, str(o.get("o")), float(o["z"]), lo, hi))
        elif measure == MEASURE_DISTANCE and isinstance(o.get("d"), (int, float)):
            points.append(NightPoint(run.run_id, run.logical_date, str(o.get("o")), float(o["d"]), 0.0, 0.0))
    return measure, points
