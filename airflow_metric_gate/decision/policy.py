"""The decision rules shared by every policy: which policy and direction a declaration has, what blocks.

Evaluate, replay, the operators, the command line, the report and the UI ask these functions; none
of them re-derives a rule.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from airflow_metric_gate.enums import ERROR, FAIL, Role

__all__ = [
    "CONTINUING",
    "DEFAULT_DIRECTIONS",
    "DIRECTIONS",
    "POLICIES",
    "TRUSTING_OUTCOMES",
    "blocking_results",
    "blocks",
    "direction_of",
    "policy_of",
    "reports_only",
    "run_policy",
]

#: The decision policies: ``reference`` (SPEC sections 2-10, the default) and ``calibrated``.
POLICIES: tuple[str, ...] = ("reference", "calibrated")

#: The values of a declaration's ``direction``: the side on which a change is a regression.
#: ``up``: an increase is a regression (a loss, a grad norm, a KL); ``down``: a decrease is (a
#: reward, an accuracy); ``both``: either side is.
DIRECTIONS: tuple[str, ...] = ("up", "down", "both")

#: The direction of a regression for the metrics of the built-in defaults table.  Any other metric
#: is ``both`` unless its declaration says otherwise.
DEFAULT_DIRECTIONS: Mapping[str, str] = {
    "train/grad_norm": "up",
    "train/ppo_kl": "up",
    "train/train_rollout_logprob_abs_diff": "up",
    "train/train_rollout_kl": "up",
    "rollout/raw_reward": "down",
    "rollout/tito_session_mismatch_rate/v1/assistant_text": "up",
    "rollout/tito_session_mismatch_rate/v2/assistant_text": "up",
}

#: A declaration's night outcomes that let the night feed that declaration's later baselines.
TRUSTING_OUTCOMES: frozenset[str] = frozenset({"pass", "inactive"})

#: Outcomes of a night that continues a regression already reported on an earlier night (a level
#: shift or a drift): still FAIL and still untrusted, but they do not page again.
CONTINUING: frozenset[str] = frozenset({"shift", "drift-continues"})


def policy_of(gate: Mapping[str, Any]) -> str:
    """Return a stored or serialized declaration's policy (``reference`` when it names none).

    :param gate: a stored or serialized declaration.
    """
    return gate.get("policy") or "reference"


def direction_of(gate: Mapping[str, Any]) -> str:
    """Return the side on which a declaration's metric regresses: its own ``direction``, else the default.

    :param gate: a stored or serialized declaration.
    """
    return gate.get("direction") or DEFAULT_DIRECTIONS.get(gate.get("metric_key", ""), "both")


def run_policy(gates: Mapping[Any, Mapping[str, Any]] | Any) -> str:
    """Return ``reference``, ``calibrated`` or ``mixed`` for the declarations of a run.

    :param gates: the run's declarations (stored or serialized), as a mapping or any iterable.
    """
    values = gates.values() if isinstance(gates, Mapping) else gates
    found = {policy_of(g) for g in values}
    if len(found) > 1:
        return "mixed"
    return found.pop() if found else "reference"


def blocks(status: str, gate: Mapping[str, Any], *, enforce: bool, outcome: str | None = None) -> bool:
    """Decide whether one result blocks: fails the task, exits 1.  The one place it is decided.

    A FAIL or ERROR blocks when enforcement applies (``enforce`` for the run, or the declaration's
    own ``enforce``), unless the declaration is allowlisted, of ``severity: warn``, or the night
    continues a regression already reported (a level shift or a drift: :data:`CONTINUING`).

    :param status: the result's status.
    :param gate: its declaration (stored or serialized).
    :param enforce: run-level enforcement.
    :param outcome: the declaration's night outcome under the calibrated policy, if any.
    """
    if status not in (FAIL, ERROR):
        return False
    if not (enforce or gate.get("enforce")) or gate.get("allowlist_reason") or gate.get("severity") == "warn":
        return False
    return outcome not in CONTINUING


def blocking_results(verdict: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    """Return the verdict's results that block, in the verdict's order (worst first).

    Each was decided by :func:`blocks` when the verdict was built (``"blocking": true``); nothing
    here re-derives the rule.

    :param verdict: a verdict (SPEC 10).
    """
    return [r for r in verdict.get("results", ()) if r.get("blocking")]


def reports_only(verdict: Any) -> bool:
    """Whether a verdict only reports: a shadow run's.  The one place the shadow rule is decided.

    A shadow run is judged like any other, but in Airflow it fails no task (its blocking results are
    logged, not enforced), and nothing is announced (gated asset), approved or notified for it; on
    the command line the exit status follows ``blocking`` whatever the role.

    :param verdict: a verdict (SPEC 10), or whatever an XCom held in its place.
    """
    return isinstance(verdict, Mapping) and verdict.get("role") == Role.SHADOW.value
