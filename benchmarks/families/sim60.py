"""Family A: today's simulator (``benchmarks/accuracy.py``), used by import, through the common shape.

Its nights, noise, benign drift and benign cluster changes are those of ``accuracy.schedule`` and
``accuracy.record_for``; its faults are the kinds that benchmark injects (level shifts of 10, 30 and
50 % from a step of the night on, a doubled variance, a NaN burst, a vanished metric), aimed at the
metrics in turn.  The benign cluster changes (every level moves a few %, for good) are this
family's legitimate changes.
"""

from __future__ import annotations

import copy
import random
from collections.abc import Sequence
from pathlib import Path

import accuracy
import numpy as np
from accuracy import GATE_DEFAULTS, METRICS, record_for, schedule

from .base import TARGET, Change, Episode, Family, Fault, Label, Plan, spread_onsets, stable_seed, write_record

FAULTS = (
    Fault("shift10", 5, 3, "a 10 % level shift (the bad way) from a step of the first half on", TARGET),
    Fault("shift30", 1, 1, "a 30 % level shift from a step of the first half on", TARGET),
    Fault("shift50", 1, 1, "a 50 % level shift from a step of the first half on", TARGET),
    Fault("variance2x", 3, 3, "the per-step noise doubled from a step of the first half on"),
    Fault("nan_burst", 1, 1, "NaN at 3 consecutive steps (the last point of a once-a-run metric)", TARGET),
    Fault("vanish", 1, 1, "one metric absent from the record", TARGET),
)
assert {f.kind for f in FAULTS} == set(accuracy.KINDS)


class _Watched(random.Random):
    """A ``random.Random`` that notes the nights on which ``accuracy.schedule`` moves to a new cluster.

    ``schedule`` draws one ``random()`` per night after the first to decide a cluster change; the
    draws made inside ``gauss`` are not those, so they are not noted.
    """

    def __init__(self, seed: int) -> None:
        super().__init__(seed)
        self.draws: list[float] = []
        self._inside = 0

    def gauss(self, mu: float = 0.0, sigma: float = 1.0) -> float:
        self._inside += 1
        try:
            return super().gauss(mu, sigma)
        finally:
            self._inside -= 1

    def random(self) -> float:
        value = super().random()
        if not self._inside:
            self.draws.append(value)
        return value


class Sim60Family(Family):
    name = "sim60"
    steps_choices = (60,)
    faults = FAULTS

    def __init__(self) -> None:
        self._years: dict[tuple[int, int, int], list] = {}

    def metrics(self) -> tuple[str, ...]:
        return METRICS

    def gates(self) -> dict:
        return {"gates": [{"metric_key": m} for m in METRICS]}

    def _year(self, seed: int, steps: int, nights: int) -> tuple[list, list[int]]:
        key = (seed, steps, nights)
        rng = _Watched(seed)
        scale = {"nights": nights, "steps": steps, "warmup": nights, "spacing": 1, "duration": 0}
        year = schedule(None, scale, rng)
        # the first draw of each night after the first decides a cluster change (see accuracy.schedule)
        changes = [i + 1 for i, u in enumerate(rng.draws[: nights - 1]) if u < 1.0 / 90.0]
        self._years[key] = year
        return year, changes

    def plan(self, seed: int, steps: int, *, nights: int = 360, warmup: int = 30,
             episodes_per_fault: int = 4, kinds: Sequence[str] | None = None, quiet: int = 14) -> Plan:
        _, changes = self._year(seed, steps, nights)
        plan = Plan(self.name, seed, steps, nights, warmup)
        plan.changes = [Change(n, "new cluster (every level a few % away)", METRICS) for n in changes]
        for fault in FAULTS:
            if kinds is not None and fault.kind not in kinds:
                continue
            rng = np.random.default_rng(stable_seed(self.name, "episodes", seed, steps, nights, fault.kind))
            allowed = [n for n in range(warmup, nights - fault.nights + 1)
                       if not any(c.night <= n <= c.night + quiet for c in plan.changes)]
            for index, onset in enumerate(spread_onsets(rng, allowed, episodes_per_fault)):
                metric = METRICS[index % len(METRICS)]
                last = GATE_DEFAULTS[metric]["steps"] == "last"  # one point, logged at the final step
                start = steps - 1 if last else int(rng.integers(steps // 4, max(steps // 2, steps // 4 + 1)))
                plan.episodes.append(Episode(fault, onset, index, (metric,), metric, {"from": start}))
        return plan

    def write_night(self, plan: Plan, label: Label, folder: Path) -> None:
        key = (plan.seed, plan.steps, plan.nights)
        year = self._years.get(key) or self._year(*key)[0]
        night = copy.deepcopy(year[label.night])  # its own copy of the night's random state
        if label.episode is not None:
            night.inject = (label.episode.fault.kind, label.episode.target, label.episode.params["from"])
        record = record_for(night, plan.steps)
        write_record(folder, {"train-0.jsonl": record.metrics})
