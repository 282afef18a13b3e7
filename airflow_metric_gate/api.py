"""The public Python API: load declarations, run the gate, read a typed verdict.

Everything here is re-exported by ``airflow_metric_gate`` (``from airflow_metric_gate import run_gate``)
and loads no Airflow module.  The stages underneath are in :mod:`airflow_metric_gate.pipeline`.
"""

from __future__ import annotations

import copy
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, fields
from datetime import date, datetime, time, timezone
from typing import Any

from airflow_metric_gate.dates import parse_datetime, utc
from airflow_metric_gate.declarations import GateDeclaration, load_gates_file, resolve_declarations, with_policy
from airflow_metric_gate.pipeline import EvaluateOptions, RunInfo, SeriesIdentity, evaluate_options, new_run_id
from airflow_metric_gate.pipeline import run_gate as _run_gate
from airflow_metric_gate.report import DEFAULT_TABLE_ROWS, render_report
from airflow_metric_gate.store import MetricStore, StoreInputError, opened_store
from airflow_metric_gate.verdict import DEFAULT_MAX_RESULTS

__all__ = ["EvaluateOptions", "Verdict", "load_declarations", "run_gate"]

#: The defaults of the keywords that ``options=`` replaces in :func:`run_gate` (the others: ``None``).
_KEYWORD_DEFAULTS: dict[str, Any] = {"enforce": False, "aggregate": "mean", "all_results": False,
                                     "max_results": DEFAULT_MAX_RESULTS}


def load_declarations(
    source: str | os.PathLike | Sequence[Mapping[str, Any] | GateDeclaration],
    *,
    defaults: Mapping[str, Any] | None = None,
    policy: str | None = None,
) -> list[GateDeclaration]:
    """Read and resolve gate declarations from any source.

    :param source: a gates file (``.yaml``/``.yml``, ``.json``, or ``.py`` with ``register_ci_gate``
        calls; local path or object-storage URI), or a list of declaration mappings as written in a
        gates file (``metric_key`` and optionally ``steps``, ``constraint``, ``enforce``,
        ``allowlist_reason``); :class:`~airflow_metric_gate.declarations.GateDeclaration` objects
        pass through.
    :param defaults: entries extending or overriding the defaults table.
    :param policy: ``reference`` or ``calibrated`` for the declarations that set no policy of their
        own (nor their gates file); ``None``: leave them (``reference``).
    :raises DeclarationError: naming the file, line or gate and the field at fault.
    :raises TypeError: ``source`` is neither a path nor a list.
    """
    if isinstance(source, (str, os.PathLike)):
        return with_policy(load_gates_file(source, defaults=defaults), policy)
    if isinstance(source, Sequence) and not isinstance(source, (str, bytes, bytearray)):
        return with_policy(resolve_declarations(source, defaults=defaults, source="declarations"), policy)
    raise TypeError(f"load_declarations: expected a path or a list of mappings, not {type(source).__name__}")


@dataclass(frozen=True)
class Verdict:
    """A gate's verdict (``airflow-metric-gate/verdict/v1``, see the Verdict page of the docs).

    The fields are the verdict's JSON keys; :meth:`to_dict` gives that JSON back exactly.  The keys
    beyond SPEC 10, present only when they have something to say (``warnings``, and the calibrated
    policy's ``policy``, ``declarations``, ``level_shifts``, ``drifts``, ``improvements``,
    ``blowups``, ``starved``), are in :attr:`sections`.
    """

    schema: str
    series: str
    backend: str
    suite: str
    run_id: str
    role: str
    logical_date: str
    trusted: bool
    enforced: bool
    blocking: int
    counts: dict
    summary: list
    results: list
    truncated: int
    sections: dict = field(default_factory=dict)

    @classmethod
    def from_dict(cls, verdict: Mapping[str, Any]) -> Verdict:
        """Build a :class:`Verdict` from the verdict's JSON (a dict, as in XCom or ``--json``).

        :param verdict: the verdict.
        """
        known = {f.name for f in fields(cls)} - {"sections"}
        return cls(**{name: copy.deepcopy(verdict[name]) for name in known},
                   sections={k: copy.deepcopy(v) for k, v in verdict.items() if k not in known})

    @property
    def level_shifts(self) -> list:
        """The level shifts the calibrated policy reported (empty under ``reference``)."""
        return list(self.sections.get("level_shifts", ()))

    @property
    def blocked(self) -> bool:
        """True when an enforced FAIL or ERROR fails the gate (the CLI exits 1, the task fails)."""
        return self.blocking > 0

    def to_dict(self) -> dict:
        """Return the verdict's JSON: the documented keys, in their documented order."""
        out = {f.name: copy.deepcopy(getattr(self, f.name)) for f in fields(self) if f.name != "sections"}
        out.update(copy.deepcopy(self.sections))
        return out

    def report(self, *, table_rows: int | None = DEFAULT_TABLE_ROWS) -> str:
        """Return the report ``metric-gate run`` prints: summary lines, the greppable line and a table.

        :param table_rows: rows of the table per declaration (``None``: every result in the verdict).
        """
        return str(render_report(self.to_dict(), table_rows=table_rows))


def _logical_date(value: datetime | date | str | None) -> datetime:
    if value is None:
        return datetime.now(timezone.utc)
    if isinstance(value, str):
        try:
            value = parse_datetime(value, "logical_date")
        except ValueError as exc:
            raise StoreInputError(str(exc)) from None
    if isinstance(value, date) and not isinstance(value, datetime):
        value = datetime.combine(value, time(), tzinfo=timezone.utc)
    if not isinstance(value, datetime):
        raise TypeError(f"logical_date: expected a datetime, a date or an ISO 8601 string, not {type(value).__name__}")
    return utc(value)


def run_gate(
    record: Any,
    declarations: str | os.PathLike | Sequence[Mapping[str, Any] | GateDeclaration],
    *,
    series: str,
    backend: str = "cuda",
    suite: str = "default",
    store: str | MetricStore | None = None,
    role: str = "baseline",
    run_id: str | None = None,
    logical_date: datetime | date | str | None = None,
    enforce: bool = False,
    history_limit: int | None = None,
    min_history: int | None = None,
    aggregate: str = "mean",
    all_results: bool = False,
    max_results: int | None = DEFAULT_MAX_RESULTS,
    format: str = "series",
    wait: float = 0.0,
    provenance: Mapping[str, Any] | None = None,
    policy: str | None = None,
    options: EvaluateOptions | None = None,
) -> Verdict:
    """Ingest a record, select the declared steps, store them and judge them: ``metric-gate run`` in Python.

    :param record: the record: a JSON Lines file, a directory of them, or an object-storage URI;
        TensorBoard event files or CSV logs (a file or folder); for ``mlflow``, the run's location.
    :param declarations: anything :func:`load_declarations` accepts.
    :param series: the training job whose nights are comparable.
    :param backend: the hardware backend.
    :param suite: the schedule or cluster.
    :param store: a store URL (``sqlite:///...``, ``postgresql://...``) or an open store (left open);
        ``None``: ``$METRIC_GATE_STORE``, else the embedded default.
    :param role: ``baseline`` (feeds future baselines when trusted) or ``shadow`` (audit only).
    :param run_id: the store run id, the idempotency key (default: a new one); running again with
        the same id replaces that run's values.
    :param logical_date: orders the history (a ``datetime``, a ``date`` or an ISO 8601 string;
        default: now).
    :param enforce: make every FAIL or ERROR block (``Verdict.blocked``).
    :param history_limit: earlier trusted baseline runs forming the baseline (default 20).
    :param min_history: fewer baseline values make a coordinate INACTIVE (default 1).
    :param aggregate: ``mean`` or ``median``.
    :param all_results: list every result, not only FAIL and ERROR.
    :param max_results: at most this many results (``None``: no limit).
    :param format: the record format: ``series``, ``rows``, ``tensorboard``, ``csv`` or ``mlflow``.
    :param wait: seconds to wait for earlier pending nights to be judged.
    :param provenance: ``commit_sha``, ``training_job_id`` and any free-form fields, stored with the run.
    :param policy: ``reference`` or ``calibrated`` (recommended) for the declarations that set no
        policy of their own, nor their gates file; ``None``: ``reference``.
    :param options: how the run is judged, as one :class:`~airflow_metric_gate.pipeline.EvaluateOptions`
        (which also has ``max_bytes`` and ``chunk``) instead of ``enforce``, ``history_limit``,
        ``min_history``, ``aggregate``, ``all_results`` and ``max_results``; those keywords then
        keep their defaults.
    :raises RecordError, DeclarationError, StoreInputError: bad input; nothing was stored.
    :raises TypeError: ``store`` is neither a URL nor an open store; or ``options`` was given with
        one of the keywords it replaces.

    See also :func:`load_declarations` and :class:`Verdict`.
    :raises StoreUnavailable: the store cannot be reached, or earlier nights are still pending
        (``EarlierRunsPending``); try again later.
    """
    keywords: dict[str, Any] = {"enforce": enforce, "aggregate": aggregate, "all_results": all_results,
                                "max_results": max_results}
    if history_limit is not None:
        keywords["history_limit"] = history_limit
    if min_history is not None:
        keywords["min_history"] = min_history
    if options is not None:
        changed = [name for name, value in keywords.items() if value != _KEYWORD_DEFAULTS.get(name)]
        if changed:
            raise TypeError(f"run_gate(): pass the evaluate options either as options= or as keywords, not both "
                            f"(got options= and {', '.join(changed)})")
    given = evaluate_options(options, {} if options is not None else keywords, caller="run_gate")
    resolved = load_declarations(declarations, policy=policy)
    run = RunInfo(run_id=run_id or new_run_id(), role=role, logical_date=_logical_date(logical_date),
                  provenance={"source": "python", **(provenance or {})})
    identity = SeriesIdentity(series, backend, suite)
    with opened_store(store) as opened:
        verdict = _run_gate(opened, record=record, declarations=resolved, identity=identity, run=run,
                            format=format, wait=wait, options=given)
    return Verdict.from_dict(verdict)
