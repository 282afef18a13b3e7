"""Family C: real training runs on this CPU, one small run a night with a new seed.

- ``digits``: scikit-learn's ``MLPClassifier`` (one hidden layer, SGD with momentum) trained step by
  step with ``partial_fit`` on minibatches of the digits data scikit-learn ships, a fixed held-out
  part kept for evaluation.  Per step: ``train/loss`` (the minibatch loss scikit-learn reports),
  ``train/grad_norm`` (the norm of the minibatch loss gradient at the weights before the step,
  computed from ``coefs_``/``intercepts_``), ``eval/accuracy`` (on the held-out part).
- ``cartpole``: a REINFORCE agent written with numpy (a 4-16-2 tanh policy, normalised discounted
  returns) on gymnasium's ``CartPole-v1``.  Per step (a batch of episodes, then one update):
  ``rollout/raw_reward`` (the mean episode return), ``train/policy_loss``, ``train/grad_norm``,
  ``train/ppo_kl`` (the KL from the policy before the update to the one after, on the batch's states).

Real faults, each a run with the fault in it: learning rate x10, label noise (digits), a frozen
layer, a reward bug (cartpole: the learner is fed the reward with its sign flipped), training
stopped early.  Legitimate changes: two configuration changes a year (a wider layer, a bigger
batch; more episodes a step, a halved learning rate).

Training is what costs here, so records are always cached (see ``Family.night_folder``).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np

from .base import TARGET, Change, Episode, Family, Fault, Label, Plan, spread_onsets, stable_seed, write_record

STOPPED_AT = 0.3  # a run stopped early ends after this share of its steps


class _RealFamily(Family):
    expensive = True
    #: (description, configuration changes) of the two legitimate changes.
    changes: tuple[tuple[str, dict], ...] = ()
    #: metric -> the faults that should be caught by it (by kind).
    affected: dict[str, tuple[str, ...]] = {}

    def plan(self, seed: int, steps: int, *, nights: int = 360, warmup: int = 30,
             episodes_per_fault: int = 4, kinds: Sequence[str] | None = None, quiet: int = 14) -> Plan:
        rng = np.random.default_rng(stable_seed(self.name, "plan", seed, steps, nights))
        plan = Plan(self.name, seed, steps, nights, warmup)
        windows = (((nights * 3) // 10, nights // 2), ((nights * 6) // 10, (nights * 8) // 10))
        for (description, config), (lo, hi) in zip(self.changes, windows):
            plan.changes.append(Change(int(rng.integers(lo, max(hi, lo + 1))), description,
                                       tuple(config.get("moves", ()))))
        for fault in self.faults:
            if kinds is not None and fault.kind not in kinds:
                continue
            frng = np.random.default_rng(stable_seed(self.name, "episodes", seed, steps, nights, fault.kind))
            allowed = [n for n in range(warmup, nights - fault.nights + 1)
                       if not any(c.night <= n <= c.night + quiet for c in plan.changes)]
            for index, onset in enumerate(spread_onsets(frng, allowed, episodes_per_fault)):
                plan.episodes.append(Episode(fault, onset, index, self.affected[fault.kind]))
        return plan

    def config(self, label: Label) -> dict:
        """The night's training configuration: the legitimate changes in force, then its fault."""
        config: dict = {}
        for change in label.changes:
            config.update(dict(self.changes)[change.description]["set"])
        if label.episode is not None:
            config["fault"] = label.episode.fault.kind
        return config

    def write_night(self, plan: Plan, label: Label, folder: Path) -> None:
        seed = stable_seed(self.name, "night", plan.seed, label.night)  # a new seed every night
        series = self.train(seed, plan.steps, self.config(label))
        write_record(folder, {"train-0.jsonl": series})

    def train(self, seed: int, steps: int, config: dict) -> dict[str, list[tuple[int, float]]]:
        raise NotImplementedError


# -- digits: scikit-learn's MLPClassifier ------------------------------------------------------------

def _mlp_gradient_norm(model, X: np.ndarray, y: np.ndarray) -> float:
    """The norm of the mean cross-entropy gradient of a one-hidden-layer ReLU/softmax MLP on (X, y)."""
    W0, W1 = model.coefs_
    b0, b1 = model.intercepts_
    pre = X @ W0 + b0
    h = np.maximum(pre, 0.0)
    z = h @ W1 + b1
    z -= z.max(axis=1, keepdims=True)
    p = np.exp(z)
    p /= p.sum(axis=1, keepdims=True)
    index = np.searchsorted(model.classes_, y)
    dz = p
    dz[np.arange(len(y)), index] -= 1.0
    dz /= len(y)
    dh = (dz @ W1.T) * (pre > 0)
    parts = (h.T @ dz, dz.sum(axis=0), X.T @ dh, dh.sum(axis=0))
    return float(np.sqrt(sum(float((g * g).sum()) for g in parts)))


class DigitsFamily(_RealFamily):
    name = "digits"
    steps_choices = (60, 300)
    faults = (
        Fault("lr_x10", 1, 1, "learning rate x10", TARGET),
        Fault("label_noise", 1, 1, "40 % of the training labels replaced by random ones"),
        Fault("frozen_layer", 1, 1, "the hidden layer frozen (only the output layer learns)"),
        Fault("stopped_early", 1, 1, f"training stopped after {int(STOPPED_AT * 100)} % of its steps"),
    )
    changes = (
        ("hidden layer 32 -> 64 units", {"set": {"hidden": 64}, "moves": ("train/loss", "eval/accuracy")}),
        ("batch 32 -> 64", {"set": {"batch": 64}, "moves": ("train/loss", "train/grad_norm")}),
    )
    affected = {
        "lr_x10": ("train/loss", "train/grad_norm", "eval/accuracy"),
        "label_noise": ("train/loss", "eval/accuracy", "train/grad_norm"),
        "frozen_layer": ("train/loss", "eval/accuracy", "train/grad_norm"),
        "stopped_early": ("train/loss", "eval/accuracy", "train/grad_norm"),
    }
    LR = 0.05

    def metrics(self) -> tuple[str, ...]:
        return ("train/loss", "train/grad_norm", "eval/accuracy")

    def gates(self) -> dict:
        return {"gates": [
            {"metric_key": "train/loss", "steps": "all",
             "constraint": {"rel_up": 0.5, "abs_floor_up": 0.05, "rel_down": 0.8, "abs_floor_down": 0.05}},
            {"metric_key": "train/grad_norm"},  # the defaults table's entry
            {"metric_key": "eval/accuracy", "steps": "last",
             "constraint": {"rel_up": 0.2, "abs_floor_up": 0.05, "rel_down": 0.05, "abs_floor_down": 0.02}},
        ]}

    def train(self, seed: int, steps: int, config: dict) -> dict[str, list[tuple[int, float]]]:
        import warnings

        from sklearn.datasets import load_digits
        from sklearn.exceptions import ConvergenceWarning
        from sklearn.neural_network import MLPClassifier

        X, y = load_digits(return_X_y=True)
        X = X / 16.0
        split = np.random.default_rng(stable_seed(self.name, "split")).permutation(len(X))
        held_out, train = split[:400], split[400:]
        rng = np.random.default_rng(seed)
        fault = config.get("fault")
        labels = y.copy()
        if fault == "label_noise":
            noisy = rng.random(len(y)) < 0.4
            labels[noisy] = rng.integers(0, 10, size=int(noisy.sum()))
        lr = self.LR * (10.0 if fault == "lr_x10" else 1.0)
        batch = config.get("batch", 32)
        model = MLPClassifier(hidden_layer_sizes=(config.get("hidden", 32),), solver="sgd", learning_rate_init=lr,
                              momentum=0.9, batch_size=batch, random_state=int(rng.integers(2**31)))
        last = max(1, int(steps * STOPPED_AT)) if fault == "stopped_early" else steps
        out: dict[str, list[tuple[int, float]]] = {"train/loss": [], "train/grad_norm": [], "eval/accuracy": []}
        classes = np.arange(10)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ConvergenceWarning)
            for step in range(last):
                b = rng.choice(train, size=batch, replace=False)
                if step == 0:
                    model.partial_fit(X[b], labels[b], classes=classes)
                    grad = _mlp_gradient_norm(model, X[b], labels[b])  # no weights exist before the first fit
                else:
                    grad = _mlp_gradient_norm(model, X[b], labels[b])
                    frozen = ([model.coefs_[0].copy(), model.intercepts_[0].copy()]
                              if fault == "frozen_layer" else None)
                    model.partial_fit(X[b], labels[b])
                    if frozen is not None:
                        model.coefs_[0][...] = frozen[0]
                        model.intercepts_[0][...] = frozen[1]
                out["train/loss"].append((step, float(model.loss_)))
                out["train/grad_norm"].append((step, grad))
                accuracy = float((model.predict(X[held_out]) == y[held_out]).mean())
                out["eval/accuracy"].append((step, accuracy))
        return out


# -- cartpole: REINFORCE with numpy on gymnasium ------------------------------------------------------

class CartPoleFamily(_RealFamily):
    name = "cartpole"
    steps_choices = (60,)
    faults = (
        Fault("lr_x10", 1, 1, "learning rate x10", TARGET),
        Fault("frozen_layer", 1, 1, "the hidden layer frozen (only the output layer learns)"),
        Fault("reward_bug", 1, 1, "the learner is fed the reward with its sign flipped"),
        Fault("stopped_early", 1, 1, f"training stopped after {int(STOPPED_AT * 100)} % of its steps"),
    )
    changes = (
        # twice the episodes a step average the gradient over twice the samples: the grad norm falls
        # and the KL between successive policies moves with it, not only the reward
        ("4 episodes a step instead of 2", {"set": {"episodes": 4},
                                            "moves": ("rollout/raw_reward", "train/grad_norm", "train/ppo_kl")}),
        ("learning rate halved", {"set": {"lr_scale": 0.5}, "moves": ("train/ppo_kl", "rollout/raw_reward")}),
    )
    affected = {
        "lr_x10": ("train/ppo_kl", "train/grad_norm", "rollout/raw_reward"),
        "frozen_layer": ("train/ppo_kl", "train/grad_norm", "rollout/raw_reward"),
        "reward_bug": ("rollout/raw_reward", "train/ppo_kl", "train/grad_norm"),
        "stopped_early": ("rollout/raw_reward", "train/ppo_kl", "train/grad_norm"),
    }
    LR = 0.01
    HIDDEN = 16
    MAX_EPISODE_STEPS = 200

    def metrics(self) -> tuple[str, ...]:
        return ("rollout/raw_reward", "train/grad_norm", "train/ppo_kl")

    def gates(self) -> dict:
        return {"gates": [
            {"metric_key": "rollout/raw_reward", "steps": "all",
             "constraint": {"rel_up": 1.0, "abs_floor_up": 10.0, "rel_down": 0.5, "abs_floor_down": 10.0}},
            {"metric_key": "train/grad_norm", "steps": "all",
             "constraint": {"rel_up": 1.0, "abs_floor_up": 1.0, "rel_down": 0.8, "abs_floor_down": 1.0}},
            {"metric_key": "train/ppo_kl", "steps": "all",
             "constraint": {"rel_up": 3.0, "abs_floor_up": 0.02, "rel_down": 0.95, "abs_floor_down": 0.001}},
        ]}

    def train(self, seed: int, steps: int, config: dict) -> dict[str, list[tuple[int, float]]]:
        import gymnasium as gym

        rng = np.random.default_rng(seed)
        fault = config.get("fault")
        lr = self.LR * config.get("lr_scale", 1.0) * (10.0 if fault == "lr_x10" else 1.0)
        episodes = config.get("episodes", 2)
        h_n = self.HIDDEN
        W0 = rng.normal(0.0, 0.5, (4, h_n))
        b0 = np.zeros(h_n)
        W1 = rng.normal(0.0, 1.0 / np.sqrt(h_n), (h_n, 2))
        b1 = np.zeros(2)
        env = gym.make("CartPole-v1", max_episode_steps=self.MAX_EPISODE_STEPS)
        last = max(1, int(steps * STOPPED_AT)) if fault == "stopped_early" else steps
        names = ("rollout/raw_reward", "train/policy_loss", "train/grad_norm", "train/ppo_kl")
        out: dict[str, list[tuple[int, float]]] = {n: [] for n in names}

        def probabilities(S: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
            h = np.tanh(S @ W0 + b0)
            z = h @ W1 + b1
            z -= z.max(axis=1, keepdims=True)
            p = np.exp(z)
            return h, p / p.sum(axis=1, keepdims=True)

        try:
            for step in range(last):
                states, actions, returns, lengths = [], [], [], []
                for _ in range(episodes):
                    obs, _ = env.reset(seed=int(rng.integers(2**31)))
                    rewards, done = [], False
                    while not done:
                        h = np.tanh(obs @ W0 + b0)
                        z = h @ W1 + b1
                        p1 = 1.0 / (1.0 + np.exp(z[0] - z[1]))
                        action = int(rng.random() < p1)
                        states.append(obs)
                        actions.append(action)
                        obs, reward, terminated, truncated, _ = env.step(action)
                        rewards.append(-reward if fault == "reward_bug" else reward)
                        done = terminated or truncated
                    g, ret = 0.0, []
                    for r in reversed(rewards):
                        g = r + 0.99 * g
                        ret.append(g)
                    returns.extend(reversed(ret))
                    lengths.append(len(rewards))  # the true return: CartPole pays 1 a step balanced
                S, A, G = np.asarray(states), np.asarray(actions), np.asarray(returns)
                adv = (G - G.mean()) / (G.std() + 1e-8)
                h, P = probabilities(S)
                n = len(A)
                logp = np.log(P[np.arange(n), A] + 1e-12)
                loss = float(-(logp * adv).sum() / episodes)
                dz = P.copy()
                dz[np.arange(n), A] -= 1.0
                dz *= adv[:, None] / episodes
                gW1, gb1 = h.T @ dz, dz.sum(axis=0)
                dh = (dz @ W1.T) * (1.0 - h * h)
                gW0, gb0 = S.T @ dh, dh.sum(axis=0)
                grad = float(np.sqrt(sum(float((g * g).sum()) for g in (gW0, gb0, gW1, gb1))))
                W1 -= lr * gW1
                b1 -= lr * gb1
                if fault != "frozen_layer":
                    W0 -= lr * gW0
                    b0 -= lr * gb0
                _, P_new = probabilities(S)
                kl = float((P * (np.log(P + 1e-12) - np.log(P_new + 1e-12))).sum(axis=1).mean())
                for name, value in zip(names, (float(np.mean(lengths)), loss, grad, max(kl, 0.0))):
                    out[name].append((step, value))
        finally:
            env.close()
        return out
