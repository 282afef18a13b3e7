"""The common shape of a family of nightly data: a plan of a year, labelled nights, records on disk.

A family yields, for a seed and a number of steps per night, a year of nights.  Each night is a
record in the package's JSON Lines format (one folder per night, one line per metric) and a label:
clean, or inside an injected fault episode (its kind, its onset night, how many nights since), plus
the legitimate changes in force (step changes a good gate reports once and then accepts) and
whether the night was pre-empted (ended early).

Episodes: each injected fault is an episode on its own copy of the clean series.  The episode's
nights are the clean nights from its onset on with the fault applied (the same seeds, the same
noise), so an episode differs from the clean year only by its fault, and no fault ever reaches
another episode or the clean year.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import shutil
import tempfile
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

#: Bumped whenever a generator changes what it writes, so cached records of an older generator are not reused.
CACHE_VERSION = "v1"
DONE = "_SUCCESS"
#: The share of episodes to catch within the window, for the kinds that have a target.
TARGET = 0.95
LABEL = "_label.json"


@dataclass(frozen=True)
class Fault:
    """One kind of injected fault.

    :param kind: its name (``lr_x10``, ``reward_drop_20``, ...).
    :param nights: how many consecutive nights an episode lasts.
    :param window: the nights within which a good gate should catch it (1: the first night).
    :param description: one line for the tables.
    :param target: the share of episodes a good gate catches within ``window`` (issue 18's targets),
        or ``None`` where no target is set (the figure is shown, not judged).
    """

    kind: str
    nights: int = 1
    window: int = 1
    description: str = ""
    target: float | None = None


@dataclass(frozen=True)
class Episode:
    """An injected fault on its own copy of the series, from ``onset`` for ``fault.nights`` nights.

    :param target: the metric the fault is aimed at, when it is aimed at one.
    :param affected: the metrics whose declarations should catch it.
    :param params: what the generator needs to apply it (a step, a factor, ...), JSON-able.
    """

    fault: Fault
    onset: int
    index: int
    affected: tuple[str, ...]
    target: str | None = None
    params: Mapping[str, Any] = field(default_factory=dict)

    @property
    def key(self) -> str:
        """A name for this episode, unique within its series (folder names, cache keys)."""
        what = json.dumps([self.target, list(self.affected), dict(self.params)], sort_keys=True)
        return f"{self.fault.kind}-{self.index:02d}-n{self.onset:03d}-{hashlib.sha256(what.encode()).hexdigest()[:8]}"

    def nights(self, total: int) -> range:
        return range(self.onset, min(self.onset + self.fault.nights, total))


@dataclass(frozen=True)
class Change:
    """A legitimate step change from ``night`` on (a dataset version, an engine upgrade)."""

    night: int
    description: str
    metrics: tuple[str, ...]


@dataclass(frozen=True)
class Label:
    """What a night is: clean, or night ``age`` of an episode; the changes in force; pre-empted or not."""

    night: int
    episode: Episode | None = None
    age: int = 0
    changes: tuple[Change, ...] = ()
    preempted: bool = False

    @property
    def clean(self) -> bool:
        return self.episode is None

    def to_json(self) -> dict:
        out: dict[str, Any] = {"night": self.night, "label": "clean" if self.clean else "injected",
                               "preempted": self.preempted,
                               "changes": [{"night": c.night, "description": c.description} for c in self.changes]}
        if self.episode is not None:
            out.update(fault=self.episode.fault.kind, onset=self.episode.onset, age=self.age,
                       target=self.episode.target, affected=list(self.episode.affected))
        return out


@dataclass
class Plan:
    """A year of one family for one seed and step count: its changes, pre-empted nights and episodes."""

    family: str
    seed: int
    steps: int
    nights: int
    warmup: int
    changes: list[Change] = field(default_factory=list)
    preempted: set[int] = field(default_factory=set)
    episodes: list[Episode] = field(default_factory=list)

    def label(self, night: int, episode: Episode | None = None) -> Label:
        changes = tuple(c for c in self.changes if c.night <= night)
        age = 0 if episode is None else night - episode.onset
        return Label(night, episode, age, changes, night in self.preempted)


class Family:
    """A family of nightly data.  Subclasses set the class attributes and write the records.

    The records of a night are written by :meth:`write_night` into a folder of their own; the
    harness reads them through the package's record reader.  :meth:`night_folder` caches them on
    disk, keyed by family, seed, steps, episode and night, so a rerun reads instead of regenerating.
    """

    name = "family"
    #: The steps-per-night counts this family is measured at.
    steps_choices: tuple[int, ...] = (60,)
    #: The fault kinds this family injects.
    faults: tuple[Fault, ...] = ()
    #: Whether generating a night is expensive (real training): then records are always cached.
    expensive = False

    def gates(self) -> dict:
        """The gates file's content (``gates`` and optionally ``defaults``), without any policy key."""
        raise NotImplementedError

    def metrics(self) -> tuple[str, ...]:
        """Every metric a clean night logs."""
        raise NotImplementedError

    def plan(self, seed: int, steps: int, *, nights: int = 360, warmup: int = 30,
             episodes_per_fault: int = 4, kinds: Sequence[str] | None = None, quiet: int = 14) -> Plan:
        """The year: legitimate changes, pre-empted nights, and ``episodes_per_fault`` episodes per fault kind.

        Onsets fall after ``warmup`` and never within ``quiet`` nights after a legitimate change.
        """
        raise NotImplementedError

    def write_night(self, plan: Plan, label: Label, folder: Path) -> None:
        """Write the night's record files (JSON Lines) into ``folder`` (which exists and is empty)."""
        raise NotImplementedError

    # -- caching --------------------------------------------------------------------------------

    def cache_key(self, plan: Plan, label: Label) -> str:
        episode = "clean" if label.episode is None else label.episode.key
        year = f"seed{plan.seed}-steps{plan.steps}-nights{plan.nights}"
        return f"{CACHE_VERSION}/{self.name}/{year}/{episode}/night-{label.night:04d}"

    def night_folder(self, plan: Plan, label: Label, cache: Path) -> Path:
        """The night's record folder under ``cache``, written first if it is not there yet (atomically)."""
        folder = cache / self.cache_key(plan, label)
        if (folder / DONE).exists():
            return folder
        folder.parent.mkdir(parents=True, exist_ok=True)
        scratch = Path(tempfile.mkdtemp(prefix=".tmp-", dir=folder.parent))
        try:
            self.write_night(plan, label, scratch)
            # the label beside the record (names starting with "_" are not record files), then the
            # completion marker a sensor would wait for
            (scratch / LABEL).write_text(json.dumps(label.to_json()), encoding="utf-8")
            (scratch / DONE).write_text("", encoding="utf-8")
            if folder.exists() and not (folder / DONE).exists():  # an interrupted write of an older generator
                stale = Path(tempfile.mkdtemp(prefix=".stale-", dir=folder.parent))
                os.replace(folder, stale / "night")
                shutil.rmtree(stale, ignore_errors=True)
            try:
                os.replace(scratch, folder)
            except OSError:
                # another process sharing the cache wrote the same night first: keep its copy (the
                # same bytes, the generators are deterministic)
                if not (folder / DONE).exists():
                    raise
        finally:
            if scratch.exists():
                shutil.rmtree(scratch)
        return folder


# -- writing records ------------------------------------------------------------------------------

def _value(v: float) -> float | str:
    if math.isnan(v):
        return "NaN"
    if math.isinf(v):
        return "Infinity" if v > 0 else "-Infinity"
    return round(float(v), 10)


def record_line(metric: str, points: Iterable[tuple[int, float]]) -> str:
    """One JSON Lines record line: ``{"metric": ..., "series": [[step, value], ...]}``."""
    series = [[int(s), _value(float(v))] for s, v in points]
    return json.dumps({"metric": metric, "series": series}, separators=(",", ":"))


def write_record(folder: Path, files: Mapping[str, Mapping[str, Iterable[tuple[int, float]]]]) -> None:
    """Write one JSON Lines file per training process: file name -> metric -> points."""
    for name, metrics in files.items():
        lines = [record_line(m, pts) for m, pts in metrics.items()]
        (folder / name).write_text("".join(line + "\n" for line in lines), encoding="utf-8")


def stable_seed(*parts: object) -> int:
    """A 64-bit seed from any parts, the same on every machine and Python (no ``hash()``)."""
    digest = hashlib.sha256("/".join(map(str, parts)).encode()).digest()
    return int.from_bytes(digest[:8], "little")


def spread_onsets(rng, allowed: Sequence[int], count: int) -> list[int]:
    """``count`` onset nights drawn without replacement from ``allowed`` (fewer if it is short), sorted."""
    pool = list(allowed)
    if not pool:
        return []
    picks = rng.choice(len(pool), size=min(count, len(pool)), replace=False)
    return sorted(pool[int(i)] for i in picks)


def default_cache() -> Path:
    """The default record cache: ``$METRIC_GATE_BENCH_CACHE``, else the user's cache folder."""
    env = os.environ.get("METRIC_GATE_BENCH_CACHE")
    if env:
        return Path(env)
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "airflow-metric-gate" / "accuracy-suite"
