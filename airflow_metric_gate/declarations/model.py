"""The gate declaration, the defaults table and the one merging of defaults tables (SPEC 3 and 4)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from marshmallow import ValidationError

from airflow_metric_gate.errors import LocatedError
from airflow_metric_gate.rules import declaration_summary, rule_options
from airflow_metric_gate.schemas.declarations import CONSTRAINT_KEYS, GateDeclarationSchema, load_defaults_table
from airflow_metric_gate.schemas.messages import format_errors

__all__ = ["GATE_DEFAULTS", "DeclarationError", "GateDeclaration", "canonical_key", "merge_defaults"]


def _entry(steps: str, **constraint: float) -> Mapping[str, Any]:
    return MappingProxyType({"steps": steps, "constraint": MappingProxyType(constraint)})


#: The built-in defaults table (read-only): metric key -> ``{"steps": ..., "constraint": {...}}``.
#: The TITO mismatch rates keep ``"last"`` (one per-session summary point per run) and set no
#: ``abs_floor_down``.  Extend or override it per DAG with ``defaults=`` or in a gates file.
GATE_DEFAULTS: Mapping[str, Mapping[str, Any]] = MappingProxyType(
    {
        "train/grad_norm": _entry("all", rel_up=0.5, abs_floor_up=0.1, rel_down=0.8, abs_floor_down=0.1),
        "train/ppo_kl": _entry("all", rel_up=0.5, abs_floor_up=0.02, rel_down=0.8, abs_floor_down=0.02),
        "train/train_rollout_logprob_abs_diff": _entry(
            "all", rel_up=0.5, abs_floor_up=0.02, rel_down=0.8, abs_floor_down=0.02
        ),
        "train/train_rollout_kl": _entry(
            "all", rel_up=0.5, abs_floor_up=0.02, rel_down=0.8, abs_floor_down=0.02
        ),
        "rollout/raw_reward": _entry("all", rel_up=0.5, abs_floor_up=0.05, rel_down=0.2, abs_floor_down=0.05),
        "rollout/tito_session_mismatch_rate/v1/assistant_text": _entry(
            "last", rel_up=1.0, abs_floor_up=0.1, rel_down=1.0
        ),
        "rollout/tito_session_mismatch_rate/v2/assistant_text": _entry(
            "last", rel_up=1.0, abs_floor_up=0.1, rel_down=1.0
        ),
    }
)


class DeclarationError(LocatedError):
    """A gate declaration or gates file is invalid; the message names where and which field.

    :param message: what is wrong (including which gate, when known).
    :param path: the file or source concerned, if any.
    :param line: the 1-based line number, if known.
    :param field: the declaration field or ``register_ci_gate`` argument concerned, if any.
    """


def canonical_key(literal: Any) -> str:
    """Return the canonical JSON of a literal: sorted keys, no spaces (SPEC 4).

    ``"all"`` gives ``"\\"all\\""``, ``[1, 0]`` gives ``"[1,0]"``, and ``1`` and ``1.0`` stay distinct.

    :param literal: a ``steps`` or ``constraint`` literal.
    """
    return json.dumps(literal, sort_keys=True, separators=(",", ":"), allow_nan=False)


@dataclass(frozen=True)
class GateDeclaration:
    """A resolved, validated gate declaration (immutable and hashable).

    Build it with :func:`declare`, :func:`resolve_declarations` or a gates file, not directly:
    the keys must be those of the literal as written.

    :param metric_key: the metric to gate.
    :param steps: ``"last"``, ``"all"`` or a tuple of steps in written order.
    :param constraint: all four band parameters; keys not written are ``0.0``.
    :param steps_key: canonical JSON of the ``steps`` literal as written (or of the defaults literal).
    :param constraint_key: canonical JSON of the ``constraint`` literal as written (or of the
        defaults literal); parameters not written are not in it.
    :param enforce: whether a FAIL or ERROR of this gate blocks.
    :param allowlist_reason: why a violation of this gate is tolerated, if it is.
    :param source: where the declaration came from (``"gates.yaml:3"``), for messages only.
    :param min_failing_steps: opt-in persistence rule: the declaration's FAIL results count only when
        at least this many of its selected steps (or all of them, when fewer) leave the band in the
        run; 1 (the default) is the plain rule.
    :param band: ``"rel"`` (the default: the constraint's band around the baseline reference) or
        ``"mad"`` (opt-in robust band: the median of the coordinate's baseline values plus or minus
        ``mad_k`` times their median absolute deviation).
    :param mad_k: the half-width of the ``mad`` band in MADs; set (default
        :data:`~airflow_metric_gate.schemas.declarations.DEFAULT_MAD_K`) only with ``band="mad"``.
    :param night_mean_k: opt-in whole-night rule: the declaration's night also fails when the sum of
        its steps' robust z, divided by the square root of their number, is beyond this (see
        :func:`~airflow_metric_gate.evaluation.judge_night`); ``None`` (the default): off.
    :param severity: ``"fail"`` (the default) or ``"warn"``: a warn declaration's FAIL results are
        reported as warnings and never block; they still make the run untrusted.
    :param policy: ``"reference"`` or ``"calibrated"`` (see :mod:`airflow_metric_gate.decision`);
        ``None``: not set here (the gates file's, or the caller's, policy applies; else ``reference``).
    :param direction: the side on which a change is a regression under the calibrated policy:
        ``"up"``, ``"down"`` or ``"both"``; ``None``: the metric's default
        (:data:`~airflow_metric_gate.decision.DEFAULT_DIRECTIONS`, else ``both``).
    """

    metric_key: str
    steps: str | tuple[int, ...]
    constraint: Mapping[str, float] = field(hash=False)
    steps_key: str
    constraint_key: str
    enforce: bool = False
    allowlist_reason: str | None = None
    source: str | None = field(default=None, compare=False)
    min_failing_steps: int = 1
    band: str = "rel"
    mad_k: float | None = None
    night_mean_k: float | None = None
    severity: str = "fail"
    policy: str | None = None
    direction: str | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.steps, str):
            object.__setattr__(self, "steps", tuple(self.steps))
        filled = {k: float(self.constraint.get(k, 0.0)) for k in CONSTRAINT_KEYS}
        object.__setattr__(self, "constraint", filled)

    @property
    def coordinate(self) -> tuple[str, str, str]:
        """``(metric_key, steps_key, constraint_key)``: the declaration part of a stored value's identity."""
        return (self.metric_key, self.steps_key, self.constraint_key)

    def to_dict(self) -> dict[str, Any]:
        """Return a JSON-safe dict that :meth:`from_dict` turns back into an equal declaration."""
        out = {
            "metric_key": self.metric_key,
            "steps": self.steps if isinstance(self.steps, str) else list(self.steps),
            "constraint": dict(self.constraint),
            "steps_key": self.steps_key,
            "constraint_key": self.constraint_key,
            "enforce": self.enforce,
            "allowlist_reason": self.allowlist_reason,
            "source": self.source,
        }
        out.update(self.rule_options())  # written only when set, so default declarations read as before
        return out

    def rule_options(self) -> dict[str, Any]:
        """Return the opt-in judging options that differ from their defaults (empty for a default declaration).

        What is stored with a run's declarations and serialized (see
        :func:`airflow_metric_gate.rules.rule_options`).
        """
        return rule_options(self)

    def summary(self) -> dict[str, Any]:
        """Return the declaration as it is stored with a run (what evaluation and replay judge with)."""
        return declaration_summary(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> GateDeclaration:
        """Rebuild a declaration from :meth:`to_dict` output.

        :param data: the dict, e.g. read back from XCom.
        :raises DeclarationError: ``data`` is not a serialized declaration.
        """
        try:
            loaded = GateDeclarationSchema().load(data)
        except ValidationError as err:
            message = f"not a serialized gate declaration: {format_errors(err.messages)}"
            raise DeclarationError(message) from None
        return cls(**loaded)


def _plain(value: Any) -> Any:
    if isinstance(value, Mapping):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


def _merge(base: dict[str, dict[str, Any]], extra: Mapping[str, Any] | None, where: str | None) -> None:
    if extra is None:
        return
    try:
        table = load_defaults_table(extra)
    except ValidationError as err:
        message = f"defaults: {format_errors(err.messages)}"
        raise DeclarationError(message, path=where, field="defaults") from None
    for metric, entry in table.items():
        base.setdefault(metric, {}).update(_plain(entry))


def merge_defaults(*extras: Mapping[str, Any] | None, where: str | None = None) -> dict[str, dict[str, Any]]:
    """Return the built-in defaults table extended or overridden by ``extras``, as plain dicts.

    The one place defaults are merged (SPEC 3).  Each entry of an extra table overrides the entry
    of its metric so far field by field: an entry setting only ``steps`` keeps the ``constraint``
    it had.  A ``constraint`` is replaced as a whole, never merged key by key.  Later tables win.

    :param extras: tables of metric key -> ``{"steps": ..., "constraint": {...}}`` (either
        optional); ``None`` is skipped.
    :param where: the file or source the tables come from, for messages.
    :raises DeclarationError: an entry is invalid.
    """
    table = _plain(GATE_DEFAULTS)
    for extra in extras:
        _merge(table, extra, where)
    return table
