"""Families of nightly data for the accuracy suite (``benchmarks/accuracy_suite.py``).

- ``sim60``: today's simulator (``benchmarks/accuracy.py``), 60 steps a night;
- ``rlsim``: a realistic RL simulator, 60, 300 or 1,000 steps a night;
- ``digits``: real training, scikit-learn's MLPClassifier on its bundled digits data;
- ``cartpole``: real training, a numpy REINFORCE agent on gymnasium's CartPole.
"""

from __future__ import annotations

from .base import Change, Episode, Family, Fault, Label, Plan, default_cache


def get_family(name: str) -> Family:
    """The family called ``name`` (the real-training ones import scikit-learn or gymnasium lazily)."""
    if name == "sim60":
        from .sim60 import Sim60Family

        return Sim60Family()
    if name == "rlsim":
        from .rlsim import RLSimFamily

        return RLSimFamily()
    if name == "digits":
        from .real import DigitsFamily

        return DigitsFamily()
    if name == "cartpole":
        from .real import CartPoleFamily

        return CartPoleFamily()
    raise KeyError(f"unknown family {name!r} (expected one of {', '.join(FAMILIES)})")


FAMILIES = ("sim60", "rlsim", "digits", "cartpole")

__all__ = ["FAMILIES", "Change", "Episode", "Family", "Fault", "Label", "Plan", "default_cache", "get_family"]
