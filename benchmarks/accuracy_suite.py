"""The accuracy suite: false alarms and detections on several families of nightly data, per policy.

Each family (``benchmarks/families/``) yields a year of nights for a seed and a number of steps per
night: a clean year, and injected faults, each an episode on its own copy of the series.  Every
night is written as a record folder (JSON Lines, one line per metric) and gated through the
package's own pipeline (``airflow_metric_gate.run_gate``: ingest, select, persist, evaluate) on a
fresh embedded SQLite store per series, nights in logical-date order, enforced, with a gates file
written for the family.  An episode starts from a copy of the clean series' store taken just before
its onset night, so it is judged against exactly the history the clean year had.

Measured per family, steps count and seed, then shown as the spread over seeds (min, median, max):

- the share of clean nights flagged (the run not trusted, or any FAIL or ERROR), from the end of the
  warm-up on and outside the nights that follow a legitimate change; and the share paged;
- for each fault kind, the share of episodes caught (a FAIL or ERROR on a metric the fault affects)
  on the first night, within 3 nights and within 10 nights;
- after each legitimate step change, the pages (enforced nights that fail) in the following nights.

    python benchmarks/accuracy_suite.py --scale smoke             # seconds; what the test suite runs
    python benchmarks/accuracy_suite.py --scale moderate --json out.json
    python benchmarks/accuracy_suite.py --family rlsim --steps 300 --seeds 1 2 3 --policy calibrated

The policy under test goes into the gates file as the top-level key ``policy: NAME``, written only
for a policy other than ``reference`` (``reference`` is the package's default and needs no key).
Python callers pass a :class:`PolicyUnderTest`, whose ``on_night`` callback sees every night's
verdict with the open store (to accept a reported level shift, for example)::

    import accuracy_suite as suite   # with benchmarks/ on sys.path

    policy = suite.PolicyUnderTest(
        "calibrated",
        on_night=suite.on_level_shift(detect=lambda verdict: ..., accept=lambda outcome, shift: ...),
        flags=lambda verdict: ...,   # metric -> what flagged it, if the policy reports more than FAIL/ERROR
    )
    result = suite.run_suite(["rlsim"], suite.SCALES["moderate"], policy, cache=suite.default_cache())
    print(suite.tables(result["summary"]))

From the command line, ``--on-night MODULE:FUNCTION`` names such a callback; ``--on-night
oracle-triage`` marks every clean night trusted and every faulty one untrusted by hand (a perfectly
triaged history), ``--on-night oracle-rebaseline`` rebaselines on each legitimate change, and
``--on-night accept-legitimate-shifts`` accepts a reported level shift that a legitimate change
explains (the calibrated policy's ``level_shifts``), never one inside a fault episode.

Deterministic from the seeds: the same seeds give the same figures.
"""

from __future__ import annotations

import argparse
import importlib
import json
import shutil
import sqlite3
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import yaml
from families import FAMILIES, Episode, Family, Label, Plan, default_cache, get_family

from airflow_metric_gate import run_gate
from airflow_metric_gate.declarations import DeclarationError
from airflow_metric_gate.pipeline import SeriesIdentity
from airflow_metric_gate.store.sqlite import SQLiteStore

T0 = datetime(2026, 1, 1, tzinfo=timezone.utc)
REFERENCE = "reference"
FLAGGING = ("FAIL", "ERROR")

#: Scales: nights a year, warm-up nights before the first onset, episodes per fault kind, nights
#: after a legitimate change kept apart from the false-alarm rate, seeds, and steps per family.
SCALES: dict[str, dict[str, Any]] = {
    "smoke": {"nights": 30, "warmup": 6, "episodes": 1, "change_window": 5, "seeds": (1,),
              "steps": {"sim60": (10,), "rlsim": (20,), "digits": (4,), "cartpole": (4,)}},
    "moderate": {"nights": 360, "warmup": 30, "episodes": 4, "change_window": 14, "seeds": (1, 2, 3),
                 "steps": {"sim60": (60,), "rlsim": (60, 300), "digits": (60,), "cartpole": (60,)}},
    "full": {"nights": 360, "warmup": 30, "episodes": 8, "change_window": 14, "seeds": (1, 2, 3),
             "steps": {"sim60": (60,), "rlsim": (60, 300, 1000), "digits": (60, 300), "cartpole": (60,)}},
}


# -- the policy under test ------------------------------------------------------------------------

@dataclass
class NightOutcome:
    """What the harness hands ``on_night`` after each gated night.

    :param store: the series' store, open (the clean year's, or the episode's own copy).
    :param identity: the series identity every night of this store is gated under.
    :param gates_path: the gates file the nights are gated with.
    :param verdict: the night's verdict (the ``--json`` verdict, a dict).
    :param flags: metric -> the statuses or reports that flagged it this night.
    """

    family: str
    seed: int
    steps: int
    label: Label
    run_id: str
    logical_date: datetime
    store: SQLiteStore
    identity: SeriesIdentity
    gates_path: Path
    verdict: dict
    flags: dict[str, set[str]]
    paged: bool


def default_flags(verdict: Mapping[str, Any]) -> dict[str, set[str]]:
    """metric -> the statuses (FAIL, ERROR) of its results in the verdict."""
    flags: dict[str, set[str]] = {}
    for r in verdict.get("results", ()):
        if r.get("status") in FLAGGING:
            flags.setdefault(r["metric_key"], set()).add(r["status"])
    return flags


@dataclass
class PolicyUnderTest:
    """The decision policy measured, and how the harness reads and answers its verdicts.

    :param name: written as the gates file's top-level ``policy:`` key unless it is ``reference``.
    :param on_night: called after every gated night (clean year and episodes) with a
        :class:`NightOutcome`; may act on the store (accept a level shift, mark a night).  A
        truthy return value records the night as *accepted* (counted in the figures: accepts
        after a legitimate change are expected, accepts inside a fault episode are not).  See
        :func:`on_level_shift` for the usual shape.
    :param flags: verdict -> metric -> what flagged it; a night is flagged when this is not empty
        or the run is not trusted.  Replace it to count a policy's own reports (a level shift, a
        drift) as flags.
    :param run_options: more keyword arguments for ``airflow_metric_gate.run_gate`` (``history_limit``, ...).
    :param gates_keys: more top-level keys for the gates file.
    :param options: metric -> fields added to that metric's declarations (``"*"``: every declaration),
        e.g. ``{"*": {"band": "mad", "mad_k": 6}}``.
    """

    name: str = REFERENCE
    on_night: Callable[[NightOutcome], None] | None = None
    flags: Callable[[Mapping[str, Any]], dict[str, set[str]]] = default_flags
    run_options: Mapping[str, Any] = field(default_factory=dict)
    gates_keys: Mapping[str, Any] = field(default_factory=dict)
    options: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)

    def gates_document(self, family: Family) -> dict:
        doc = dict(family.gates())
        if self.options:
            doc["gates"] = [{**g, **self.options.get("*", {}), **self.options.get(g["metric_key"], {})}
                            for g in doc["gates"]]
        top: dict[str, Any] = {}
        if self.name != REFERENCE:
            top["policy"] = self.name
        top.update(self.gates_keys)
        return {**top, **doc}


def on_level_shift(
    detect: Callable[[Mapping[str, Any]], Any],
    accept: Callable[[NightOutcome, Any], Any],
) -> Callable[[NightOutcome], bool]:
    """Build an ``on_night`` callback that accepts every level shift a verdict reports.

    :param detect: verdict -> the level shift it reports (anything truthy: its start night, a
        dict...), or a falsy value when it reports none.
    :param accept: called with the night's outcome and what ``detect`` returned; does the accept
        (``metric-gate accept``'s Python call on ``outcome.store`` for ``outcome.identity``).
    """

    def callback(outcome: NightOutcome) -> bool:
        shift = detect(outcome.verdict)
        if not shift:
            return False
        accept(outcome, shift)
        return True

    return callback


def oracle_triage(outcome: NightOutcome) -> bool:
    """A perfectly triaged history: every clean night marked trusted by hand, every faulty one untrusted.

    Shows what a policy does once its own false alarms stop reaching its baselines.
    """
    status = "trusted" if outcome.label.clean else "untrusted"
    outcome.store.mark(status, by="run_id", key=outcome.run_id, reason="benchmark oracle triage")
    return False


def oracle_rebaseline(outcome: NightOutcome) -> bool:
    """Rebaseline on the night of every legitimate change (what on-call would do knowing of it); an accept."""
    if any(c.night == outcome.label.night for c in outcome.label.changes):
        outcome.store.mark_rebaseline(outcome.run_id)
        return True
    return False


#: How many nights after a legitimate change on-call still takes a reported level shift for it.
ACCEPT_WITHIN = 14


def accept_legitimate_shifts(outcome: NightOutcome) -> bool:
    """On-call who knows the legitimate changes: accept a reported level shift that one explains, nothing else.

    A verdict's ``level_shifts`` entry (the calibrated policy's report) on a metric that a
    legitimate change moved in the last :data:`ACCEPT_WITHIN` nights is accepted from the night
    the change landed (``airflow_metric_gate.accept.accept_level``); a level shift inside a fault
    episode is never accepted.  Needs a package version with ``accept_level``.
    """
    shifts = [s for s in outcome.verdict.get("level_shifts", ()) or () if not s.get("adopted")]
    if not shifts or not outcome.label.clean:
        return False
    recent = [c for c in outcome.label.changes if 0 <= outcome.label.night - c.night < ACCEPT_WITHIN]
    explained = [s for s in shifts if any(s.get("metric_key") in c.metrics for c in recent)]
    if not explained:
        return False
    from airflow_metric_gate.accept import accept_level  # a package version with the calibrated policy

    # on-call knows the night the change landed and accepts the new level from that night on: accepting
    # again for another metric the same change moved marks the same nights (and the nights since), so the
    # new level's history keeps growing instead of starting again from a later night
    since = f"night-{max(c.night for c in recent):04d}"
    identity = outcome.identity
    accept_level(outcome.store, identity.series, identity.backend, identity.suite, since=since,
                 reason=f"benchmark: {', '.join(c.description for c in recent)}", by="accuracy-suite")
    return True


#: ``--on-night`` names for the callbacks above.
CALLBACKS: dict[str, Callable[[NightOutcome], bool]] = {
    "oracle-triage": oracle_triage, "oracle-rebaseline": oracle_rebaseline,
    "accept-legitimate-shifts": accept_legitimate_shifts,
}


# -- gating a series ------------------------------------------------------------------------------

@dataclass
class Judged:
    """One gated night: its label and what the verdict said."""

    label: Label
    trusted: bool
    flags: dict[str, set[str]]
    paged: bool
    accepted: bool = False
    #: the calibrated verdict's night entries (``declarations``: outcome, z, threshold, side, ...)
    #: and what else it reported (``improvements``, ``blowups``, ...), by metric
    explained: dict[str, list[dict]] = field(default_factory=dict)

    @property
    def flagged(self) -> bool:
        return not self.trusted or bool(self.flags)


#: the calibrated verdict's fields kept per night, to show why an episode was or was not caught
_EXPLAINING = ("outcome", "direction", "z", "threshold", "level", "side", "steps_judged", "driven_count",
               "count")


def _explained(verdict: Mapping[str, Any]) -> dict[str, list[dict]]:
    out: dict[str, list[dict]] = {}
    for section in ("declarations", "level_shifts", "drifts", "within_night", "improvements", "blowups"):
        for entry in verdict.get(section, ()):
            kept = {k: entry[k] for k in _EXPLAINING if k in entry}
            out.setdefault(entry["metric_key"], []).append({"section": section, **kept})
    return out


def snapshot(source: Path, dest: Path) -> None:
    """Copy a SQLite store consistently (the backup API), while its own connection stays open."""
    if dest.exists():
        dest.unlink()
    src = sqlite3.connect(source)
    try:
        out = sqlite3.connect(dest)
        try:
            src.backup(out)
        finally:
            out.close()
    finally:
        src.close()


class SeriesRunner:
    """Gates a family's clean year and its episodes for one seed and steps count."""

    def __init__(self, family: Family, plan: Plan, policy: PolicyUnderTest, cache: Path, workdir: Path) -> None:
        self.family, self.plan, self.policy, self.cache = family, plan, policy, cache
        self.workdir = workdir / f"{family.name}-seed{plan.seed}-steps{plan.steps}"
        if self.workdir.exists():
            shutil.rmtree(self.workdir)
        self.workdir.mkdir(parents=True)
        self.gates_path = self.workdir / "gates.yaml"
        self.gates_path.write_text(yaml.safe_dump(policy.gates_document(family), sort_keys=False), encoding="utf-8")
        self.identity = SeriesIdentity(family.name, "bench", f"seed{plan.seed}-steps{plan.steps}")

    def gate(self, store: SQLiteStore, label: Label) -> Judged:
        folder = self.family.night_folder(self.plan, label, self.cache)
        run_id = f"night-{label.night:04d}"
        logical_date = T0 + timedelta(days=label.night)
        verdict = run_gate(
            folder, self.gates_path, series=self.identity.series, backend=self.identity.backend,
            suite=self.identity.suite, store=store, run_id=run_id, logical_date=logical_date, enforce=True,
            max_results=None, **dict(self.policy.run_options),
        ).to_dict()
        flags = self.policy.flags(verdict)
        paged = verdict["blocking"] > 0
        accepted = False
        if self.policy.on_night is not None:
            accepted = bool(self.policy.on_night(NightOutcome(
                self.family.name, self.plan.seed, self.plan.steps, label, run_id, logical_date, store,
                self.identity, self.gates_path, verdict, flags, paged)))
        return Judged(label, bool(verdict["trusted"]), flags, paged, accepted, _explained(verdict))

    def run(self) -> tuple[list[Judged], dict[str, list[Judged]]]:
        """Gate the clean year, and every episode on a copy of the store taken before its onset."""
        plan = self.plan
        by_onset: dict[int, list[Episode]] = {}
        for episode in plan.episodes:
            by_onset.setdefault(episode.onset, []).append(episode)
        clean_db, snap = self.workdir / "clean.db", self.workdir / "snapshot.db"
        clean: list[Judged] = []
        episodes: dict[str, list[Judged]] = {}
        with SQLiteStore(clean_db) as store:
            for night in range(plan.nights):
                if night in by_onset:
                    snapshot(clean_db, snap)
                    for episode in by_onset[night]:
                        episodes[episode.key] = self.run_episode(episode, snap)
                clean.append(self.gate(store, plan.label(night)))
        shutil.rmtree(self.workdir)
        return clean, episodes

    def run_episode(self, episode: Episode, snap: Path) -> list[Judged]:
        db = self.workdir / f"{episode.key}.db"
        shutil.copyfile(snap, db)
        try:
            with SQLiteStore(db) as store:
                return [self.gate(store, self.plan.label(n, episode)) for n in episode.nights(self.plan.nights)]
        finally:
            for suffix in ("", "-wal", "-shm"):
                Path(f"{db}{suffix}").unlink(missing_ok=True)


# -- figures --------------------------------------------------------------------------------------

def _share(flags: Iterable[bool]) -> float | None:
    flags = list(flags)
    return sum(flags) / len(flags) if flags else None


def figures(family: Family, plan: Plan, clean: list[Judged], episodes: dict[str, list[Judged]],
            change_window: int) -> dict:
    """The figures of one series (family, seed, steps) from its gated nights."""
    after_change = {n for c in plan.changes for n in range(c.night, c.night + change_window)}
    counted = [j for j in clean if j.label.night >= plan.warmup and j.label.night not in after_change]
    per_metric = {m: _share(m in j.flags for j in counted) for m in family.metrics()}
    changes = []
    for c in plan.changes:
        window = [j for j in clean if c.night <= j.label.night < c.night + change_window]
        changes.append({
            "night": c.night, "description": c.description, "nights": len(window),
            "pages": sum(j.paged for j in window),
            "pages_on_changed_metrics": sum(j.paged and any(m in j.flags for m in c.metrics) for j in window),
            "flagged": sum(j.flagged for j in window),
            "accepts": sum(j.accepted for j in window),
            "flagged_before": sum(j.flagged for j in clean if c.night - change_window <= j.label.night < c.night),
        })
    kinds: dict[str, dict] = {}
    for episode in plan.episodes:
        judged = episodes.get(episode.key, [])
        caught = [any(m in j.flags for m in episode.affected) for j in judged]
        first = next((i for i, hit in enumerate(caught) if hit), None)
        k = kinds.setdefault(episode.fault.kind, {"window": episode.fault.window, "nights": episode.fault.nights,
                                                  "description": episode.fault.description,
                                                  "target": episode.fault.target, "episodes": []})
        twin = clean[episode.onset] if episode.onset < len(clean) else None  # the same night without the fault
        k["episodes"].append({"onset": episode.onset, "target": episode.target, "first_caught": first,
                              "twin_flagged": bool(twin and any(m in twin.flags for m in episode.affected)),
                              "any_flag_first_night": bool(judged and judged[0].flagged),
                              # what the verdict said of the affected metrics on the first night
                              "first_night": {m: judged[0].explained.get(m, []) for m in episode.affected}
                              if judged else {},
                              "accepts": sum(j.accepted for j in judged)})
    for k in kinds.values():
        eps = k["episodes"]
        firsts = [e["first_caught"] for e in eps]
        for name, within in (("first_night", 1), ("within_3", 3), ("within_10", 10)):
            k[name] = _share(f is not None and f < within for f in firsts)
        k["caught"] = _share(f is not None for f in firsts)
        k["accepted_episodes"] = sum(e["accepts"] > 0 for e in eps)
        # the share of episodes whose clean twin (the onset night without the fault) was flagged on the same
        # metrics: when it is high, a first-night catch says little about the fault
        k["twin_flagged"] = _share(e["twin_flagged"] for e in eps)
        k["target_window"] = k[{1: "first_night", 3: "within_3"}.get(k["window"], "within_10")]
    preempted = [j for j in clean if j.label.preempted]
    return {
        "family": family.name, "seed": plan.seed, "steps": plan.steps, "nights": plan.nights,
        "warmup": plan.warmup, "change_window": change_window, "clean_nights_counted": len(counted),
        "false_alarm_rate": _share(j.flagged for j in counted),
        "page_rate": _share(j.paged for j in counted),
        "false_alarm_rate_all_nights": _share(j.flagged for j in clean),
        "trusted_nights": sum(j.trusted for j in clean),
        "preempted_nights": len(preempted), "preempted_flagged": sum(j.flagged for j in preempted),
        "per_metric_false_alarm_rate": per_metric,
        "changes": changes,
        "max_pages_after_a_change": max((c["pages"] for c in changes), default=None),
        "accepts_in_clean_year": sum(j.accepted for j in clean),
        "faults": kinds,
    }


def measure(family_name: str, seed: int, steps: int, scale: Mapping[str, Any], policy: PolicyUnderTest,
            cache: Path, workdir: Path, kinds: Sequence[str] | None = None) -> dict:
    """Gate one family's clean year and episodes for one seed and steps count; return its figures."""
    family = get_family(family_name)
    plan = family.plan(seed, steps, nights=scale["nights"], warmup=scale["warmup"],
                       episodes_per_fault=scale["episodes"], kinds=kinds, quiet=scale["change_window"])
    started = time.perf_counter()
    clean, episodes = SeriesRunner(family, plan, policy, cache, workdir).run()
    out = figures(family, plan, clean, episodes, scale["change_window"])
    out["policy"] = policy.name
    out["elapsed_s"] = round(time.perf_counter() - started, 1)
    return out


# -- tables ---------------------------------------------------------------------------------------

def spread(values: Iterable[float | None]) -> tuple[float, float, float] | None:
    vals = [v for v in values if v is not None]
    if not vals:
        return None
    return min(vals), statistics.median(vals), max(vals)


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{100 * x:.1f}%"


def _cell(s: tuple[float, float, float] | None, fmt: Callable[[float | None], str] = _pct) -> str:
    if s is None:
        return "-"
    lo, mid, hi = s
    return fmt(mid) if lo == hi else f"{fmt(mid)} ({fmt(lo)}-{fmt(hi)})"


def _num(x: float | None) -> str:
    return "-" if x is None else f"{x:g}"


def summarize(runs: Sequence[dict]) -> dict:
    """Group the per-seed figures by (policy, family, steps) with their spread over seeds."""
    groups: dict[tuple[str, str, int], list[dict]] = {}
    for r in runs:
        groups.setdefault((r["policy"], r["family"], r["steps"]), []).append(r)
    out = {}
    for (policy, family, steps), rs in groups.items():
        g: dict[str, Any] = {"policy": policy, "family": family, "steps": steps, "seeds": [r["seed"] for r in rs],
                             "change_window": rs[0]["change_window"]}
        for key in ("false_alarm_rate", "page_rate", "false_alarm_rate_all_nights", "max_pages_after_a_change",
                    "accepts_in_clean_year"):
            g[key] = spread(r[key] for r in rs)
        g["trusted_nights"] = spread(r["trusted_nights"] for r in rs)
        g["per_metric_false_alarm_rate"] = {m: spread(r["per_metric_false_alarm_rate"][m] for r in rs)
                                            for m in rs[0]["per_metric_false_alarm_rate"]}
        g["faults"] = {}
        for kind in rs[0]["faults"]:
            cells = [r["faults"][kind] for r in rs if kind in r["faults"]]
            g["faults"][kind] = {
                "window": cells[0]["window"], "target": cells[0]["target"],
                "episodes_per_seed": len(cells[0]["episodes"]),
                "target_window": spread(c["target_window"] for c in cells),
                **{k: spread(c[k] for c in cells)
                   for k in ("first_night", "within_3", "within_10", "caught", "accepted_episodes", "twin_flagged")},
            }
        out[f"{policy}/{family}/{steps}"] = g
    return out


#: Issue 18's targets beside the faults' own: clean nights flagged, pages after a legitimate change.
MAX_FALSE_ALARM_RATE = 0.01
MAX_PAGES_AFTER_A_CHANGE = 1


def _judged(s: tuple[float, float, float] | None, ok: bool | None, fmt: Callable[[float | None], str] = _pct) -> str:
    if s is None:
        return "-"
    return f"{_cell(s, fmt)} {'met' if ok else 'MISSED'}" if ok is not None else _cell(s, fmt)


def target_table(summary: Mapping[str, dict]) -> str:
    """One row per target, one column per (policy, family, steps); judged on the worst seed."""
    groups = list(summary.values())
    if not groups:
        return ""
    head = [f"`{g['family']}` {g['steps']} ({g['policy']})" for g in groups]
    lines = [
        "Each cell: the median over seeds (min-max); `met` or `MISSED` judged on the worst seed.",
        "",
        "| target | " + " | ".join(head) + " |",
        "|---|" + "---|" * len(groups),
    ]
    row = [f"clean nights flagged <= {MAX_FALSE_ALARM_RATE:.0%}"]
    for g in groups:
        s = g["false_alarm_rate"]
        row.append(_judged(s, None if s is None else s[2] <= MAX_FALSE_ALARM_RATE))
    lines.append("| " + " | ".join(row) + " |")
    row = [f"pages after a legitimate change <= {MAX_PAGES_AFTER_A_CHANGE}"]
    for g in groups:
        s = g["max_pages_after_a_change"]
        row.append(_judged(s, None if s is None else s[2] <= MAX_PAGES_AFTER_A_CHANGE, _num))
    lines.append("| " + " | ".join(row) + " |")
    kinds: dict[str, tuple[int, float | None]] = {}
    for g in groups:
        for kind, c in g["faults"].items():
            kinds.setdefault(kind, (c["window"], c["target"]))
    for kind, (window, target) in kinds.items():
        when = {1: "on the first night", 3: "within 3 nights"}.get(window, f"within {window} nights")
        goal = f">= {target:.0%}" if target is not None else "(no target)"
        row = [f"`{kind}` caught {when} {goal}"]
        for g in groups:
            c = g["faults"].get(kind)
            if c is None:
                row.append("")
                continue
            s = c["target_window"]
            row.append(_judged(s, None if s is None or target is None else s[0] >= target))
        lines.append("| " + " | ".join(row) + " |")
    return "\n".join(lines)


def tables(summary: Mapping[str, dict]) -> str:
    """Markdown tables: a cell is the median over seeds, with (min-max) when they differ."""
    lines = ["### Against the targets", "", target_table(summary), ""]
    for g in summary.values():
        seeds = ", ".join(map(str, g["seeds"]))
        lines += [
            f"### `{g['family']}`, {g['steps']} steps a night, policy `{g['policy']}` (seeds {seeds})",
            "",
            f"- Clean nights flagged: **{_cell(g['false_alarm_rate'])}** (paged {_cell(g['page_rate'])}; "
            f"every night of the clean year {_cell(g['false_alarm_rate_all_nights'])}); "
            f"trusted nights in the year: {_cell(g['trusted_nights'], _num)}.",
            f"- Pages in the {g['change_window']} nights from a legitimate change (worst change): "
            f"{_cell(g['max_pages_after_a_change'], _num)}; accepts in the clean year: "
            f"{_cell(g['accepts_in_clean_year'], _num)}.",
            "- Clean nights flagged by each metric: " + "; ".join(
                f"`{m}` {_cell(v)}" for m, v in g["per_metric_false_alarm_rate"].items()) + ".",
            "",
            "Caught: a FAIL or ERROR on a metric the fault affects. Twin flagged: the same night without "
            "the fault was flagged on those metrics too (a catch then says little).",
            "",
            "| fault | episodes a seed | target window | first night | within 3 | within 10 | ever | twin flagged |",
            "|---|---|---|---|---|---|---|---|",
        ]
        for kind, c in g["faults"].items():
            window = {1: "first night", 3: "3 nights"}.get(c["window"], f"{c['window']} nights")
            lines.append(f"| `{kind}` | {c['episodes_per_seed']} | {window} | {_cell(c['first_night'])} | "
                         f"{_cell(c['within_3'])} | {_cell(c['within_10'])} | {_cell(c['caught'])} | "
                         f"{_cell(c['twin_flagged'])} |")
        lines.append("")
    return "\n".join(lines)


# -- command line ---------------------------------------------------------------------------------

def _callback(spec: str | None) -> Callable[[NightOutcome], None] | None:
    if not spec:
        return None
    if spec in CALLBACKS:
        return CALLBACKS[spec]
    module, _, name = spec.partition(":")
    if not name:
        raise SystemExit(f"--on-night: expected {' or '.join(CALLBACKS)} or MODULE:FUNCTION, got {spec!r}")
    return getattr(importlib.import_module(module), name)


def run_suite(families: Sequence[str], scale: Mapping[str, Any], policy: PolicyUnderTest, *, cache: Path,
              seeds: Sequence[int] | None = None, steps: Sequence[int] | None = None,
              kinds: Sequence[str] | None = None, progress: Callable[[str], None] | None = None) -> dict:
    """Measure every family at every steps count and seed; return ``{"runs": [...], "summary": {...}}``."""
    runs = []
    with tempfile.TemporaryDirectory(prefix="accuracy-suite-") as tmp:
        for name in families:
            for n in steps or scale["steps"][name]:
                for seed in seeds or scale["seeds"]:
                    fig = measure(name, seed, n, scale, policy, cache, Path(tmp), kinds)
                    if progress:
                        progress(f"{name} steps={n} seed={seed}: clean nights flagged "
                                 f"{_pct(fig['false_alarm_rate'])} ({fig['elapsed_s']} s)")
                    runs.append(fig)
    return {"policy": policy.name, "options": dict(policy.options), "runs": runs, "summary": summarize(runs)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scale", choices=sorted(SCALES), default="moderate")
    parser.add_argument("--family", nargs="+", choices=FAMILIES, help="default: every family")
    parser.add_argument("--steps", nargs="+", type=int, help="steps a night (default: the scale's, per family)")
    parser.add_argument("--seeds", nargs="+", type=int, help="default: the scale's")
    parser.add_argument("--nights", type=int, help="nights a year (default: the scale's)")
    parser.add_argument("--episodes", type=int, help="episodes per fault kind and seed (default: the scale's)")
    parser.add_argument("--fault", nargs="+", help="only these fault kinds")
    parser.add_argument("--policy", default=REFERENCE,
                        help="written as the gates file's top-level `policy:` key unless `reference`")
    parser.add_argument("--on-night", metavar="MODULE:FUNCTION",
                        help=f"called after every night with its outcome ({', '.join(CALLBACKS)}: built in)")
    parser.add_argument("--options", type=json.loads, default={}, metavar="JSON",
                        help='fields added to declarations: {"METRIC" or "*": {"field": value}}')
    parser.add_argument("--cache", type=Path, help=f"record cache (default {default_cache()})")
    parser.add_argument("--json", metavar="FILE", help="also write every figure as JSON to FILE (- for stdout)")
    args = parser.parse_args(argv)
    scale = dict(SCALES[args.scale])
    for key in ("nights", "episodes"):
        if getattr(args, key) is not None:
            scale[key] = getattr(args, key)
    policy = PolicyUnderTest(args.policy, on_night=_callback(args.on_night), options=args.options)
    started = time.perf_counter()
    to_stdout = args.json == "-"
    try:
        result = run_suite(args.family or FAMILIES, scale, policy, cache=args.cache or default_cache(),
                           seeds=args.seeds, steps=args.steps, kinds=args.fault,
                           progress=lambda line: print(line, file=sys.stderr if to_stdout else sys.stdout, flush=True))
    except DeclarationError as exc:  # e.g. a policy this version of the package does not know
        print(f"accuracy_suite: the gates file was refused: {exc}", file=sys.stderr)
        return 2
    result["scale"] = args.scale
    result["elapsed_s"] = round(time.perf_counter() - started, 1)
    if to_stdout:
        print(json.dumps(result, indent=2))
        return 0
    print()
    print(tables(result["summary"]))
    print(f"({result['elapsed_s']} s)")
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=2), encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
