"""The calibrated policy's history in evaluate: the earlier judged nights, and why a declaration has none."""

from __future__ import annotations

import json
from collections.abc import Generator, Mapping, Sequence
from contextlib import closing

from airflow_metric_gate.chunking import read_ahead
from airflow_metric_gate.decision.history import (
    Candidate,
    choose_bridge,
    choose_history,
    cold_pool,
    needs_bridge,
    night_trusted,
)
from airflow_metric_gate.decision.parameters import SHIFT_ADOPT
from airflow_metric_gate.judging import CalibratedJudgement, judge_calibrated, merge_judgements
from airflow_metric_gate.store import MetricStore, RunRow


def outcome_key(key: tuple[str, str, str]) -> str:
    """Return the key a declaration's outcome has in a run's stored ``outcomes``.

    :param key: the declaration, ``(metric_key, steps_key, constraint_key)``.
    """
    return json.dumps(list(key))


def candidate_limit(history_limit: int) -> int:
    """How many earlier judged nights are read to choose each declaration's history from.

    :param history_limit: the baseline's history limit.
    """
    return 3 * history_limit + SHIFT_ADOPT + 5


def _candidates_of(candidates: list, key: tuple[str, str, str]) -> list[Candidate]:
    name = outcome_key(key)
    out = []
    for run_id, date, status, marked, stored in candidates:
        outcome = stored.get(name)
        out.append(Candidate(run_id, date.isoformat(), night_trusted(status, marked, outcome), outcome,
                             marked_untrusted=marked == "untrusted"))
    return out


def starved_reason(candidates: list, key: tuple[str, str, str] | None) -> str | None:
    """Name why a declaration has no trusted history although earlier nights exist, or ``None``.

    The cause named is the latest night's: with trust per declaration (``key``), what made that
    night untrusted for this declaration (marked untrusted, or its own failure); else the run's.

    :param candidates: the earlier judged nights (:meth:`MetricStore.judged_candidates`), oldest first.
    :param key: the declaration (trust per declaration), or ``None`` for the run's own trust.
    """
    if not candidates:
        return None
    if key is None:
        trusted = [c for c in candidates if (c[3] or c[2]) == "trusted"]
    else:
        trusted = [c for c in _candidates_of(candidates, key) if c.trusted]
    if trusted:
        return None
    latest = candidates[-1]
    stored = latest[4] or {}
    own = (stored.get(outcome_key(key)) or {}) if key is not None else {}
    cause: str | None
    if key is not None and latest[3] == "untrusted":
        cause = "it was marked untrusted"
    else:
        cause = own.get("cause") or (stored.get("_cause") or {}).get("cause")
    since = candidates[0][1].date().isoformat()
    because = f", the latest because {cause}" if cause else ""
    return (f"starved baseline: no trusted night since {since}: every one of the {len(candidates)} earlier "
            f"night(s) was untrusted{because}")


def _nights(store: MetricStore, run_id: str, keys: Sequence[tuple[str, str, str]],
            needed: Sequence[str]) -> Generator[tuple[list, dict[str, Mapping[int, float]]], None, None]:
    """Yield each declaration's night (:meth:`MetricStore.declaration_night`), in the order of ``keys``.

    On a store whose connection another thread may use (``reads_ahead``), the next declaration's
    night is read on one reading thread while the caller judges the one yielded
    (:func:`~airflow_metric_gate.chunking.read_ahead`).
    """
    return read_ahead(lambda key: store.declaration_night(run_id, key, needed), keys,
                      ahead=store.reads_ahead and len(keys) > 1)


def judge_calibrated_declarations(store: MetricStore, run: RunRow, gates: dict, run_errors: list,
                                  candidates: list, *, history_limit: int, min_history: int,
                                  all_results: bool, keep: int | None = None) -> CalibratedJudgement:
    """Judge a run's calibrated declarations: choose each one's history, read those nights' values, decide.

    One declaration at a time: its values and its chosen nights' values are read, judged and let go.
    On a store that allows it (``reads_ahead``: PostgreSQL), the next declaration's are read while
    this one is judged, so at most two declarations' nights are held at once.

    :param store: the metric store.
    :param run: the stored run being judged.
    :param gates: its calibrated declarations, by their keys.
    :param run_errors: the run's selection errors, ``(key, ordinal, message)``.
    :param candidates: the earlier judged nights (:meth:`MetricStore.judged_candidates`), oldest first.
    :param history_limit: the baseline's history limit.
    :param min_history: fewer history nights make a declaration INACTIVE.
    :param all_results: keep every result, not only FAIL and ERROR.
    :param keep: keep only the step FAILs and ERRORs a verdict of this many results can show
        (see :func:`~airflow_metric_gate.judging.judge_calibrated`); ``None`` keeps all.
    """
    choices = {key: choose_history(_candidates_of(candidates, key), history_limit) for key in gates}
    # a level that began at a rebaseline marker fewer than history_limit nights ago: the nights before it bridge
    if len(candidates) < history_limit and any(needs_bridge(choice, history_limit) for choice in choices.values()):
        before = store.bridge_candidates(run.run_id, candidate_limit(history_limit))
        for key, choice in choices.items():
            choose_bridge(choice, choose_history(_candidates_of(before, key), history_limit).history, history_limit)
    # the nights read: those of every declaration's history and bridge, and, for a declaration without
    # history, the few nights it judges a blow-up against (a declaration's other recent nights are read
    # only when they are among them)
    needed = sorted({c.run_id for choice in choices.values()
                     for c in (*choice.history, *choice.bridge, *cold_pool(choice))})
    parts: list[CalibratedJudgement] = []
    # closed before anything else uses the store, even when judging raises: the reading thread is done then
    with closing(_nights(store, run.run_id, list(gates), needed)) as nights:
        for (key, gate), (current, found) in zip(gates.items(), nights):
            choice = choices[key]
            for c in choice.history:
                c.values = found.get(c.run_id, {})
            for c in (*choice.recent, *choice.bridge):
                c.values = found.get(c.run_id, {})
            one = judge_calibrated({key: current}, {key: gate},
                                   [e for e in run_errors if e[0] == key], {key: choice}, run_id=run.run_id,
                                   logical_date=run.logical_date.isoformat(), min_history=min_history,
                                   all_results=all_results, keep=keep)
            del current, found
            for c in [*choice.history, *choice.recent, *choice.bridge]:  # judged: its values are not needed again
                c.values = {}
            decision = one.decisions[key]
            if decision.outcome == "inactive" and not choice.history:
                reason = starved_reason(candidates, key)
                if reason:
                    decision.report["starved"] = reason
                    for r in decision.results:
                        r.reason = reason
            decision.results = []  # one per step: the verdict keeps its own (FAIL, ERROR, or every one)
            parts.append(one)
    assert parts
    decisions = {key: d for one in parts for key, d in one.decisions.items()}
    failed = list(dict.fromkeys(e[0] for e in run_errors if e[0] in gates))  # decisions: errors first
    decisions = {key: decisions[key] for key in [*failed, *(k for k in gates if k not in failed)]}
    # one merge of every declaration's results (merging them one by one sorted the growing list each time)
    return CalibratedJudgement(merge_judgements(*(one.judgement for one in parts)), decisions)

