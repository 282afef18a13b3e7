"""Family B: a simulator of realistic nightly RL fine-tuning runs, at 60, 300 or 1,000 steps a night.

What makes it hard for a gate, each part on purpose:

- heavy-tailed per-step noise (Student-t with 3 degrees of freedom), with benign 3-10x spikes of the
  grad norm on a few steps of most nights;
- a per-night factor shared by every step of a metric (a few %: the seed, the data order),
  correlated across metrics (a bad night raises grad norm and KLs and lowers the reward together);
- slow legitimate drift: the code base improving (reward up about 10 % a year, grad norm and KLs
  slowly down);
- two legitimate step changes a year: a new dataset version (reward +6 %, grad norm -15 %) and an
  inference-engine upgrade (train/rollout KL halved, log-prob difference -40 %, mismatch rates -30 %);
- a few pre-empted nights a year that end early (40-90 % of the steps);
- the seven metrics of the defaults table; the TITO mismatch rates are one value a night (the share
  of mismatching sessions among a few thousand, so binomial night-to-night noise).

Injected faults (each an episode on its own copy of the series): lr x10, reward drops of 20 % and
50 %, a reward plateau from a step in the first half, NaN at some steps, a missing metric, a
sustained 10 % shift, a 1 %-a-night slow reward regression over 20 nights, a 1.5x mismatch rate.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np

from .base import TARGET, Change, Episode, Family, Fault, Label, Plan, spread_onsets, stable_seed, write_record

REWARD = "rollout/raw_reward"
GRAD = "train/grad_norm"
PPO_KL = "train/ppo_kl"
LOGPROB = "train/train_rollout_logprob_abs_diff"
TR_KL = "train/train_rollout_kl"
TITO1 = "rollout/tito_session_mismatch_rate/v1/assistant_text"
TITO2 = "rollout/tito_session_mismatch_rate/v2/assistant_text"
PER_STEP = (REWARD, GRAD, PPO_KL, LOGPROB, TR_KL)
ONCE = (TITO1, TITO2)
METRICS = PER_STEP + ONCE
#: The direction a regression pushes each metric: the reward falls, the others rise.
WORSE = {m: (-1.0 if m == REWARD else 1.0) for m in METRICS}

#: Per-step noise scale (relative, of a unit-variance Student-t(3)).
NOISE = {REWARD: 0.04, GRAD: 0.10, PPO_KL: 0.20, LOGPROB: 0.08, TR_KL: 0.25}
#: Per-night factor scale (relative) and its loading on the factor shared by every metric.
NIGHT_SD = {REWARD: 0.03, GRAD: 0.05, PPO_KL: 0.06, LOGPROB: 0.04, TR_KL: 0.06, TITO1: 0.05, TITO2: 0.05}
SHARED = 0.6
#: Slow legitimate drift a night (the code base improving).
DRIFT = {REWARD: 0.0003, GRAD: -0.0002, PPO_KL: -0.0001, LOGPROB: -0.0001, TR_KL: -0.0001, TITO1: 0.0, TITO2: 0.0}
#: The two legitimate step changes: name, the metrics they move and by what factor.
CHANGES = (
    ("dataset v2", {REWARD: 1.06, GRAD: 0.85}),
    ("inference-engine upgrade", {TR_KL: 0.5, LOGPROB: 0.6, TITO1: 0.7, TITO2: 0.7}),
)
#: The sessions a night's mismatch rate is measured on, and their base rates.
SESSIONS = 4000
TITO_RATE = {TITO1: 0.03, TITO2: 0.02}

FAULTS = (
    Fault("lr_x10", 1, 1, "learning rate x10: grad norm and KLs blow up, the reward falls", TARGET),
    Fault("reward_drop_20", 1, 1, "reward -20 % from a step in the first quarter", TARGET),
    Fault("reward_drop_50", 1, 1, "reward -50 % from a step in the first quarter", TARGET),
    Fault("plateau", 1, 1, "the reward stops improving from a step in the first half", TARGET),
    Fault("nan", 1, 1, "NaN at 1-3 steps of one metric", TARGET),
    Fault("missing_metric", 1, 1, "one metric absent from the record", TARGET),
    Fault("shift_10", 5, 3, "a sustained 10 % shift of one per-step metric, the bad way", TARGET),
    Fault("slow_regression", 20, 10, "the reward falls 1 % a night, compounding, for 20 nights", TARGET),
    Fault("mismatch_x1_5", 5, 3, "a TITO mismatch rate 1.5x"),
)


def curve(metric: str, x: np.ndarray) -> np.ndarray:
    """The noiseless shape of a per-step metric at fractions ``x`` of the night."""
    if metric == REWARD:
        return 0.2 + 0.6 * (1.0 - np.exp(-4.0 * x))
    if metric == GRAD:
        return 0.3 + 1.2 * np.exp(-3.0 * x)
    if metric == PPO_KL:
        return 0.004 + 0.004 * x
    if metric == LOGPROB:
        return np.full_like(x, 0.012)
    return np.full_like(x, 0.001)  # TR_KL


def _t3(rng: np.random.Generator, n: int) -> np.ndarray:
    """Unit-variance Student-t(3) draws, clipped at 8 (a heavy tail, never an absurd value)."""
    return np.clip(rng.standard_t(3, n) / np.sqrt(3.0), -8.0, 8.0)


class RLSimFamily(Family):
    name = "rlsim"
    steps_choices = (60, 300, 1000)
    faults = FAULTS

    def metrics(self) -> tuple[str, ...]:
        return METRICS

    def gates(self) -> dict:
        return {"gates": [{"metric_key": m} for m in METRICS]}

    def plan(self, seed: int, steps: int, *, nights: int = 360, warmup: int = 30,
             episodes_per_fault: int = 4, kinds: Sequence[str] | None = None, quiet: int = 14) -> Plan:
        rng = np.random.default_rng(stable_seed(self.name, "plan", seed, steps, nights))
        plan = Plan(self.name, seed, steps, nights, warmup)
        # two legitimate changes, in the second and the last third of the year
        windows = (((nights * 3) // 10, nights // 2), ((nights * 6) // 10, (nights * 8) // 10))
        for (description, moves), (lo, hi) in zip(CHANGES, windows):
            night = int(rng.integers(lo, max(hi, lo + 1)))
            plan.changes.append(Change(night, description, tuple(moves)))
        # about four pre-empted nights a year
        plan.preempted = {int(n) for n in rng.choice(np.arange(1, nights), size=max(1, nights // 90), replace=False)}
        # no onset within ``quiet`` nights after a legitimate change: those nights are measured on their own
        for f_index, fault in enumerate(FAULTS):
            if kinds is not None and fault.kind not in kinds:
                continue
            allowed = [n for n in range(warmup, nights - fault.nights + 1)
                       if not any(c.night - fault.nights < n <= c.night + quiet for c in plan.changes)]
            if not allowed:  # a short year: the episode may span a change, never start right after one
                allowed = [n for n in range(warmup, nights - fault.nights + 1)
                           if not any(c.night <= n <= c.night + quiet for c in plan.changes)]
            frng = np.random.default_rng(stable_seed(self.name, "episodes", seed, steps, nights, fault.kind))
            for index, onset in enumerate(spread_onsets(frng, allowed, episodes_per_fault)):
                plan.episodes.append(self._episode(fault, onset, index, f_index, frng, steps))
        return plan

    def _episode(self, fault: Fault, onset: int, index: int, f_index: int, rng: np.random.Generator,
                 steps: int) -> Episode:
        kind = fault.kind
        if kind == "lr_x10":
            return Episode(fault, onset, index, (GRAD, PPO_KL, TR_KL, REWARD))
        if kind in ("reward_drop_20", "reward_drop_50"):
            factor = 0.8 if kind.endswith("20") else 0.5
            return Episode(fault, onset, index, (REWARD,), REWARD,
                           {"from": int(rng.integers(0, max(1, steps // 4))), "factor": factor})
        if kind == "plateau":
            return Episode(fault, onset, index, (REWARD,), REWARD,
                           {"from": int(rng.integers(max(1, steps // 10), max(2, steps // 2)))})
        if kind == "nan":
            target = PER_STEP[index % len(PER_STEP)]
            count = int(rng.integers(1, 4))
            at = sorted(int(s) for s in rng.choice(steps, size=min(count, steps), replace=False))
            return Episode(fault, onset, index, (target,), target, {"steps": at})
        if kind == "missing_metric":
            target = METRICS[index % len(METRICS)]
            return Episode(fault, onset, index, (target,), target)
        if kind == "shift_10":
            target = PER_STEP[index % len(PER_STEP)]
            return Episode(fault, onset, index, (target,), target, {"factor": 1.0 + 0.1 * WORSE[target]})
        if kind == "slow_regression":
            return Episode(fault, onset, index, (REWARD,), REWARD, {"per_night": 0.01})
        if kind == "mismatch_x1_5":
            target = ONCE[index % len(ONCE)]
            return Episode(fault, onset, index, (target,), target, {"factor": 1.5})
        raise ValueError(f"unknown fault kind {kind!r}")

    # -- one night ----------------------------------------------------------------------------

    def night_series(self, plan: Plan, label: Label) -> dict[str, list[tuple[int, float]]]:
        """The night's metrics (metric -> points), the fault applied when the label says so."""
        night, steps = label.night, plan.steps
        rng = np.random.default_rng(stable_seed(self.name, "night", plan.seed, steps, night))
        # the per-night factors: one shared draw, one per metric
        shared = rng.standard_normal()
        own = rng.standard_normal(len(METRICS))
        factor = {}
        for i, m in enumerate(METRICS):
            z = SHARED * shared + np.sqrt(1.0 - SHARED**2) * own[i]
            factor[m] = float(np.exp(NIGHT_SD[m] * z * (-WORSE[m])))  # a bad night: reward down, the rest up
            factor[m] *= 1.0 + DRIFT[m] * night
            for change in label.changes:
                factor[m] *= dict(next(moves for d, moves in CHANGES if d == change.description)).get(m, 1.0)
        # a pre-empted night ends early; the per-step draws are made for the full night either way, so
        # an episode's night and the clean night share their noise
        length = steps
        cut = float(rng.uniform(0.4, 0.9))
        if label.preempted:
            length = max(1, int(steps * cut))
        x = np.arange(steps) / max(steps - 1, 1)
        noise = {m: _t3(rng, steps) for m in PER_STEP}
        spikes_n = rng.poisson(max(steps / 150.0, 0.3))
        spike_at = rng.choice(steps, size=min(int(spikes_n), steps), replace=False)
        spike_size = rng.uniform(3.0, 10.0, size=len(spike_at))
        tito_u = rng.random(len(ONCE))

        episode = label.episode
        kind = episode.fault.kind if episode else None
        p = episode.params if episode else {}
        values: dict[str, np.ndarray] = {}
        for m in PER_STEP:
            base = curve(m, x) * factor[m]
            if m == REWARD:
                if kind == "plateau":
                    base = np.where(np.arange(steps) >= p["from"], base[p["from"]], base)
                v = base * (1.0 + NOISE[m] * noise[m])
            else:
                v = base * np.exp(NOISE[m] * noise[m])
            if m == GRAD and len(spike_at):
                v[spike_at] *= spike_size
            values[m] = v
        if kind == "lr_x10":
            ramp = np.minimum(1.0, 0.2 + 4.0 * x)  # the blow-up builds over the first steps
            values[GRAD] *= 1.0 + 7.0 * ramp
            values[PPO_KL] *= 1.0 + 9.0 * ramp
            values[TR_KL] *= 1.0 + 3.0 * ramp
            values[REWARD] *= 1.0 - 0.4 * np.minimum(1.0, 2.0 * x)
        elif kind in ("reward_drop_20", "reward_drop_50"):
            values[REWARD][p["from"]:] *= p["factor"]
        elif kind == "nan":
            values[episode.target][p["steps"]] = np.nan
        elif kind == "shift_10":
            values[episode.target] *= p["factor"]
        elif kind == "slow_regression":
            values[REWARD] *= (1.0 - p["per_night"]) ** (label.age + 1)

        series: dict[str, list[tuple[int, float]]] = {}
        for m in PER_STEP:
            series[m] = list(zip(range(length), values[m][:length].tolist()))
        sessions = SESSIONS * length // steps
        for i, m in enumerate(ONCE):
            rate = TITO_RATE[m] * factor[m] * (p["factor"] if kind == "mismatch_x1_5" and episode.target == m else 1.0)
            # the binomial count from a uniform draw made for every night (shared with the episodes)
            count = _binomial_quantile(sessions, min(rate, 1.0), float(tito_u[i]))
            series[m] = [(length - 1, count / max(sessions, 1))]
        if kind == "missing_metric":
            series.pop(episode.target)
        return series

    def write_night(self, plan: Plan, label: Label, folder: Path) -> None:
        series = self.night_series(plan, label)
        trainer = {m: series[m] for m in (GRAD, PPO_KL, LOGPROB, TR_KL) if m in series}
        rollout = {m: series[m] for m in (REWARD, *ONCE) if m in series}
        write_record(folder, {"trainer-0.jsonl": trainer, "rollout-0.jsonl": rollout})


def _binomial_quantile(n: int, p: float, u: float) -> int:
    """The ``u`` quantile of Binomial(n, p), by its normal approximation (n is in the thousands)."""
    from statistics import NormalDist

    mean, sd = n * p, max((n * p * (1.0 - p)) ** 0.5, 1e-9)
    u = min(max(u, 1e-12), 1.0 - 1e-12)
    return max(0, min(n, round(NormalDist(mean, sd).inv_cdf(u))))
