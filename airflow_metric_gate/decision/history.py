"""A declaration's history under the calibrated policy: the candidate nights, which are trusted, which it is
judged against, and the night's decision.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from airflow_metric_gate.decision.parameters import ADOPTABLE, EXPECTED_NIGHTS, SHIFT_ADOPT
from airflow_metric_gate.decision.policy import TRUSTING_OUTCOMES
from airflow_metric_gate.decision.stats import median_sorted
from airflow_metric_gate.evaluation import Result


@dataclass


class Candidate:
    """An earlier baseline night of the series, as the caller read it, for one declaration.

    :param run_id: the store run id.
    :param logical_date: its logical date (ISO 8601), for messages.
    :param trusted: whether the night feeds this declaration's baselines (see :func:`night_trusted`).
    :param outcome: what the night's evaluation stored for this declaration, if anything.
    :param values: the declaration's values that night, by stored step (a ``dict``, or the array the
        store read them as: :class:`~airflow_metric_gate.step_values.StepValues`).
    :param marked_untrusted: whether a person marked the night untrusted (its values are not to be
        judged against, even by the blow-up test of a declaration without history: :func:`cold_pool`).
    """

    run_id: str
    logical_date: str
    trusted: bool
    outcome: Mapping[str, Any] | None = None
    values: Mapping[int, float] = field(default_factory=dict)
    marked_untrusted: bool = False


def night_trusted(run_status: str, marked: str | None, outcome: Mapping[str, Any] | None) -> bool:
    """Decide whether an earlier night feeds one declaration's baselines (trust per declaration).

    A night a person marked follows the mark for every declaration; otherwise the declaration's
    own stored outcome decides (passed or not judged yet); a night evaluated before outcomes were
    stored follows the run's status.

    :param run_status: the run's status (``trusted`` or ``untrusted``).
    :param marked: the status of the latest mark made by hand, if any.
    :param outcome: the declaration's stored outcome that night.
    """
    if marked is not None:
        return marked == "trusted"
    if outcome is not None and "o" in outcome:
        return outcome["o"] in TRUSTING_OUTCOMES
    return run_status == "trusted"


@dataclass
class HistoryChoice:
    """The history :func:`choose_history` picked for one declaration.

    :param history: the trusted nights judged against, oldest first.
    :param recent: the untrusted nights since the last trusted one, oldest first.
    :param adopted: the level shift adopted as the new baseline (its first night), if one was.
    :param earlier: how many candidate nights there were at all (for naming a starved baseline).
    :param bridge: while a new level (since a rebaseline marker: an accept, a rebaseline; or an
        adopted level shift) has fewer than ``history_limit`` nights, the trusted nights before it,
        oldest first, as many as fill ``history`` up to ``history_limit``: they calibrate the night
        test at the new level (:func:`bridged_history`).
    """

    history: list[Candidate]
    recent: list[Candidate]
    adopted: Candidate | None = None
    earlier: int = 0
    bridge: list[Candidate] = field(default_factory=list)


def _adopted_from(candidates: Sequence[Candidate]) -> tuple[int, str] | None:
    """Where the latest adopted shift starts: the index of its first night (0 when that night is older
    than the candidates) and its run id, when a later night recorded the adoption (``adopted_since``).
    """
    for i in range(len(candidates) - 1, -1, -1):
        since = (candidates[i].outcome or {}).get("adopted_since")
        if since:
            start = next((j for j in range(i, -1, -1) if candidates[j].run_id == since), 0)
            return start, str(since)
    return None


def choose_history(candidates: Sequence[Candidate], history_limit: int) -> HistoryChoice:
    """Pick one declaration's baseline nights from the earlier nights of its series, newest last.

    The trusted nights (at most ``history_limit``, the most recent); but when the most recent
    nights are :data:`SHIFT_ADOPT` or more failing nights of one level shift, the shift is adopted:
    those nights are the history, and nothing before them.  The night judged with an adopted shift
    stores it (``adopted_since``), and later nights keep it: their history starts at the shift's
    first night, its failing nights included, so an adopted level stays adopted.  The trusted
    nights before an adopted shift are its bridge while the shift's history is short.

    :param candidates: the earlier baseline nights since the rebaseline marker, oldest first.
    :param history_limit: at most this many nights.
    """
    anchor = _adopted_from(candidates)
    pool = candidates[anchor[0]:] if anchor is not None else candidates
    since_adopted = anchor[1] if anchor is not None else None

    def member(c: Candidate) -> bool:
        o = c.outcome or {}
        return c.trusted or (since_adopted is not None and o.get("since") == since_adopted
                             and o.get("o") in ADOPTABLE)

    recent: list[Candidate] = []
    for c in reversed(pool):
        if member(c):
            break
        recent.append(c)
    recent.reverse()
    if len(recent) >= SHIFT_ADOPT:
        since = (recent[-1].outcome or {}).get("since")
        shift: list[Candidate] = []
        for c in reversed(recent):
            o = c.outcome or {}
            if since is None or o.get("since") != since or o.get("o") not in ADOPTABLE:
                break
            shift.append(c)
        if len(shift) >= SHIFT_ADOPT:
            shift.reverse()
            choice = HistoryChoice(shift[-history_limit:], [], adopted=shift[0], earlier=len(candidates))
            choose_bridge(choice, [c for c in pool if member(c)], history_limit)
            return choice
    choice = HistoryChoice([c for c in pool if member(c)][-history_limit:], recent, earlier=len(candidates))
    if anchor is not None and len(pool) < history_limit:  # a level adopted a few nights ago: the nights before it
        choose_bridge(choice, [c for c in candidates[:anchor[0]] if c.trusted], history_limit)
    return choice


def needs_bridge(choice: HistoryChoice, history_limit: int) -> bool:
    """Whether a declaration's history is short (but not empty) and has no bridge yet.

    :param choice: the history :func:`choose_history` picked.
    :param history_limit: the history's full length.
    """
    return 0 < len(choice.history) < history_limit and not choice.bridge


def choose_bridge(choice: HistoryChoice, before: Sequence[Candidate], history_limit: int) -> None:
    """Give a short history its bridge: the latest of the trusted nights before its level began.

    As many as fill the history up to ``history_limit`` nights; nothing when it has a bridge already
    or is not short.  ``before`` are the trusted nights before the new level (for a rebaseline
    marker, the history :func:`choose_history` picks from the nights before it).

    :param choice: the history; changed in place.
    :param before: the trusted nights before the new level began, oldest first.
    :param history_limit: the history's full length.
    """
    if needs_bridge(choice, history_limit):
        choice.bridge = list(before[-(history_limit - len(choice.history)):])


def bridged_history(since: Sequence[Candidate], before: Sequence[Candidate]) -> list[Candidate]:
    """A short history bridged: the nights before its level began, moved to that level, then its own nights.

    Each step of each night before the marker is moved by the difference between the median of
    the nights since (the new level, ``since``) and the median of the nights before (the old
    level) at that step: multiplied by their ratio when every value of the step is positive,
    shifted by their difference otherwise.  Each step's median over the moved nights is then the
    new level's, while every night keeps its own deviation from it: the night statistic and its
    calibration are those of the old nights, about the new level.  Steps that no night since has
    are left out; nights left with no value are dropped.

    :param since: the trusted nights of the new level (at least one), oldest first.
    :param before: the trusted nights before it, oldest first.
    :return: the moved nights, then ``since``.
    """
    new: dict[int, list[float]] = {}
    for c in since:
        for step, value in c.values.items():
            new.setdefault(step, []).append(value)
    old: dict[int, list[float]] = {}
    for c in before:
        for step, value in c.values.items():
            if step in new:
                old.setdefault(step, []).append(value)
    moves: dict[int, tuple[bool, float]] = {}
    for step, olds in old.items():
        news = new[step]
        old_ref, new_ref = median_sorted(sorted(olds)), median_sorted(sorted(news))
        ratio = min(olds) > 0.0 and min(news) > 0.0
        moves[step] = (True, new_ref / old_ref) if ratio else (False, new_ref - old_ref)
    out = []
    for c in before:
        values = {}
        for step, value in c.values.items():
            move = moves.get(step)
            if move is not None:
                values[step] = value * move[1] if move[0] else value + move[1]
        if values:
            out.append(Candidate(c.run_id, c.logical_date, True, c.outcome, values))
    return out + list(since)


@dataclass
class Decision:
    """What :func:`judge_declaration` decided for one declaration's night.

    :param outcome: ``pass``, ``inactive``, ``fail`` (a new regression), ``shift`` (a level shift
        continuing), ``drift``, ``drift-continues`` or ``error``.
    :param results: one result per step, then the night's own result when it has one.
    :param stored: what the store keeps of this night for the declaration's later nights.
    :param report: what the verdict says of the night (statistic, band, level shift, drift, ...).
    """

    outcome: str
    results: list[Result]
    stored: dict[str, Any]
    report: dict[str, Any]


def cold_pool(choice: HistoryChoice) -> list[Candidate]:
    """The nights a declaration with no trusted night of its level judges a blow-up against.

    The level's own untrusted nights so far: its first night (a rebaseline marker's night, which
    began the level whatever it was judged; the first night of a series) and the latest
    :data:`~airflow_metric_gate.decision.parameters.EXPECTED_NIGHTS` after it that did not blow up
    themselves, leaving out the nights a person marked untrusted.  A few nights, whatever the size of
    a night; never the nights before the level (another level).  Empty once the declaration has a
    trusted night (its history is what it is judged against then), and on the level's first night.

    :param choice: the history :func:`choose_history` picked.
    """
    if choice.history or not choice.recent:
        return []
    first, *later = choice.recent
    pool = [c for c in later if not c.marked_untrusted and not (c.outcome or {}).get("blowup")][-EXPECTED_NIGHTS:]
    return [first, *pool] if not first.marked_untrusted else pool
