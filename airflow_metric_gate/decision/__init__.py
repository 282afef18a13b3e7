"""How a declaration's night is decided: the policies, direction, blocking and trust, in one package.

:mod:`~airflow_metric_gate.decision.policy` holds the rules every policy shares (which policy and
direction a declaration has, what blocks); :mod:`~airflow_metric_gate.decision.calibrated` the
calibrated policy's night decision.  Evaluate, replay, the operators, the command line, the report
and the UI call these; none of them re-derives a rule.
"""

from airflow_metric_gate.decision.policy import (
    DEFAULT_DIRECTIONS,
    DIRECTIONS,
    POLICIES,
    blocks,
    direction_of,
    policy_of,
    reports_only,
    run_policy,
)

__all__ = ["DEFAULT_DIRECTIONS", "DIRECTIONS", "POLICIES", "blocks", "direction_of", "policy_of", "reports_only",
           "run_policy"]
