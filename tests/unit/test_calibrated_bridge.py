"""After a new level began (an accept, a rebaseline, an adopted shift): the nights before it, moved to it, bridge.

Without them a declaration had one to four nights of the new level as its whole history: the constraint's
band (the prior) and the blow-up rule judged every step against those few nights, so a metric whose steps
vary by more than the band from one night to the next paged again on most nights after the accept; and
from five nights on, the night test was calibrated on those few nights alone (a bound of 11 instead of 4.3).
"""

from __future__ import annotations

import math
import random

import pytest
from _null_nights import night_noise

import airflow_metric_gate.decision.calibrated as calibrated
from airflow_metric_gate.decision.calibrated import Candidate, choose_history, judge_declaration
from airflow_metric_gate.decision.history import bridged_history, choose_bridge, needs_bridge
from airflow_metric_gate.enums import ERROR, FAIL, INACTIVE

KEY = ("train/grad_norm", '"all"', '{"abs_floor_down":0.0,"abs_floor_up":0.0,"rel_down":1.0,"rel_up":1.0}')
GATE = {"metric_key": KEY[0], "steps_key": KEY[1], "constraint_key": KEY[2],
        "constraint": {"rel_up": 1.0, "abs_floor_up": 0.0, "rel_down": 1.0, "abs_floor_down": 0.0}, "enforce": True,
        "allowlist_reason": None, "policy": "calibrated", "direction": "up"}


def _nights(rng, count, steps, shared, *, heavy=False, level=1.0, spread=0.5):
    """Positive nights: ``level x exp(spread x (shared night factor + own noise))``, unit variance inside."""
    return [{s: level * math.exp(spread * x) for s, x in enumerate(night)}
            for night in night_noise(rng, count, steps, shared, heavy=heavy)]


def _cands(nights, prefix, month):
    return [Candidate(f"{prefix}{i}", f"2026-{month:02d}-{i + 1:02d}", True, {"o": "pass"}, v)
            for i, v in enumerate(nights)]


def _judge(before, since, tonight, gate=GATE):
    choice = choose_history(_cands(since, "n", 2), 20)
    choose_bridge(choice, _cands(before, "o", 1), 20)
    rows = [(s, s, v) for s, v in sorted(tonight.items())]
    return judge_declaration(KEY, gate, rows, choice, run_id="tonight", logical_date="2026-03-01")


def test_each_step_moves_to_the_median_of_the_nights_since():
    before = _cands([{0: 1.0, 1: -2.0, 2: 5.0}, {0: 3.0, 1: 0.0, 2: 5.0}, {0: 2.0, 1: 2.0}, {2: 7.0}], "o", 1)
    since = _cands([{0: 10.0, 1: 10.0}, {0: 30.0, 1: 12.0}], "n", 2)
    moved = bridged_history(since, before)
    # step 0 is positive throughout: multiplied by 20 / 2; step 1 is not: shifted by 11 - 0; step 2 has no night
    # since, so it is dropped, and the night that had only step 2 with it
    assert [c.values for c in moved[:3]] == [{0: 10.0, 1: 9.0}, {0: 30.0, 1: 11.0}, {0: 20.0, 1: 13.0}]
    assert [c.run_id for c in moved] == ["o0", "o1", "o2", "n0", "n1"] and all(c.trusted for c in moved)
    assert moved[3:] == since  # the new level's own nights follow, as they are
    assert sorted(c.values[0] for c in moved[:3])[1] == 20.0  # each step's median is the new level's


def test_a_short_history_is_filled_up_to_the_history_limit():
    before = _cands(_nights(random.Random(1), 30, 5, 0.0), "o", 1)
    for count, bridge in ((0, 0), (1, 19), (4, 16), (12, 8), (19, 1), (20, 0)):
        choice = choose_history(_cands(_nights(random.Random(2), count, 5, 0.0), "n", 2), 20)
        assert needs_bridge(choice, 20) is (bridge > 0)
        choose_bridge(choice, before, 20)
        assert [c.run_id for c in choice.bridge] == [c.run_id for c in before[30 - bridge:]]
    choice = choose_history(_cands([{0: 1.0}], "n", 2), 20)
    choose_bridge(choice, before[:3], 20)
    assert len(choice.bridge) == 3 and not needs_bridge(choice, 20)  # a bridge already chosen stays


def test_an_adopted_shift_is_bridged_by_the_trusted_nights_before_it():
    nights = _nights(random.Random(3), 30, 5, 0.0)
    cands = _cands(nights[:25], "o", 1)
    shift = [Candidate(f"s{i}", f"2026-02-{i + 1:02d}", False,
                       {"o": "fail" if i == 0 else "shift", "since": "s0", "side": "above"}, v)
             for i, v in enumerate(nights[25:])]
    choice = choose_history([*cands, *shift], 20)
    assert choice.adopted is not None and [c.run_id for c in choice.history] == ["s0", "s1", "s2", "s3", "s4"]
    assert [c.run_id for c in choice.bridge] == [c.run_id for c in cands[-15:]]
    # a later night keeps the adopted level, and the same nights before it as its bridge
    adopted = [Candidate(c.run_id, c.logical_date, False, {**(c.outcome or {})}, c.values) for c in shift]
    adopted[-1].outcome = {**(adopted[-1].outcome or {}), "adopted_since": "s0"}
    later = choose_history([*cands, *adopted, Candidate("t", "2026-02-06", True, {"o": "pass"}, nights[0])], 20)
    assert [c.run_id for c in later.history] == ["s0", "s1", "s2", "s3", "s4", "t"]
    assert [c.run_id for c in later.bridge] == [c.run_id for c in cands[-14:]]
    # a level adopted 20 nights ago or more is no new level: its own nights, however few are trusted
    untrusted = [Candidate(f"u{i}", f"2026-03-{i + 1:02d}", False, {"o": "fail"}, nights[0]) for i in range(14)]
    old = choose_history([*cands, *adopted, Candidate("t", "2026-02-06", True, {"o": "pass"}, nights[0]),
                          *untrusted], 20)
    assert len(old.history) == 6 and old.bridge == []


def _accepted(seed):
    """20 nights, then one accepted night of a level 60 % lower, then a clean night of that level.

    Each step varies by a factor of about 2.2 (one sd) from night to night, as a policy gradient's grad norm does.
    """
    rng = random.Random(seed)
    before = _nights(rng, 20, 60, 0.1, spread=0.8)
    since = _nights(rng, 1, 60, 0.1, level=0.4, spread=0.8)
    return before, since, _nights(rng, 1, 60, 0.1, level=0.4, spread=0.8)[0]


def test_right_after_an_accept_clean_nights_pass_where_the_prior_paged():
    bridged, alone = [], []
    for seed in range(30):
        before, since, clean = _accepted(seed)
        bridged.append(_judge(before, since, clean).outcome)
        # the same clean night with the one accepted night as its whole history: the constraint's band judges it
        rows = [(s, s, v) for s, v in sorted(clean.items())]
        alone.append(judge_declaration(KEY, GATE, rows, choose_history(_cands(since, "n", 2), 20), run_id="t",
                                       logical_date="2026-03-01").outcome)
    assert bridged == ["pass"] * 30
    assert alone.count("fail") >= 10, alone  # 13 of 30 clean nights paged


def test_right_after_an_accept_a_regression_still_fails():
    before, since, clean = _accepted(8)
    passed = _judge(before, since, clean)
    assert passed.outcome == "pass", passed.results[-1].reason
    assert passed.report["bridge"] == {"nights_since": 1, "nights_before": 19, "since": "2026-02-01"}
    assert passed.report["nights"] == 1 and passed.report["steps_judged"] == 60
    # the bound is wider than with 20 nights of the level itself: that level is known from one night
    assert passed.report["threshold"] > 1.4 * calibrated.t_quantile(1 - calibrated.FALSE_ALARM, 19)
    worse = _judge(before, since, {s: v * 10.0 for s, v in clean.items()})  # the new level's grad norm x10
    assert worse.outcome == "fail" and worse.results[-1].bound == "night"
    assert ("20 trusted night(s), 19 of them from before 2026-02-01 moved to the level of the 1 night(s) since"
            in worse.results[-1].reason)
    assert sum(r.status == FAIL for r in worse.results[:-1]) >= 30
    blown = _judge(before, since, {s: v * 200.0 for s, v in clean.items()})
    assert blown.outcome == "fail" and blown.results[-1].bound == "blowup"
    assert "beyond anything their 20 trusted night(s) had" in blown.results[-1].reason
    better = _judge(before, since, {s: v / 20.0 for s, v in clean.items()})
    assert better.outcome == "pass" and better.report["improvement"]["side"] == "below"
    short = _judge(before, since, {s: v for s, v in clean.items() if s < 40})  # missing steps: the new nights say
    assert short.outcome == "error" and short.results[0].status == ERROR


def test_too_few_nights_before_the_marker_leave_the_prior_in_charge():
    rng = random.Random(8)
    before, since = _nights(rng, 3, 30, 0.0), _nights(rng, 1, 30, 0.0, level=0.5)
    decision = _judge(before, since, _nights(rng, 1, 30, 0.0, level=0.5)[0])
    assert "bridge" not in decision.report
    assert decision.outcome in ("inactive", "fail")
    assert decision.outcome == "fail" or {r.status for r in decision.results} == {INACTIVE}


def _bridged_rate(rng, trials, k, steps, shared, heavy):
    alarms = 0
    gate = {**GATE, "direction": "both"}
    for _ in range(trials):
        before = _nights(rng, 20, steps, shared, heavy=heavy, spread=0.1)
        *since, tonight = _nights(rng, k + 1, steps, shared, heavy=heavy, level=1.5, spread=0.1)
        decision = _judge(before, since, tonight, gate)
        assert decision.report["bridge"]["nights_since"] == k
        alarms += decision.outcome != "pass"
    return alarms / trials


@pytest.mark.slow
@pytest.mark.parametrize(("steps", "shared", "heavy", "k", "trials"), [
    (10, 0.9, True, 1, 600), (10, 0.0, False, 2, 600), (10, 0.5, True, 4, 600), (10, 0.9, True, 15, 600),
    (300, 0.5, True, 1, 250), (300, 0.9, False, 3, 250), (300, 0.5, True, 8, 250),
])
def test_bridged_nights_keep_the_false_alarm_level(monkeypatch, steps, shared, heavy, k, trials):
    """The night test's level patched to 2 % (two-sided) so that 250-600 null nights can measure it."""
    monkeypatch.setattr(calibrated, "FALSE_ALARM", 0.02)
    rate = _bridged_rate(random.Random(steps * 31 + k), trials, k, steps, shared, heavy)
    assert rate <= 0.045, rate


@pytest.mark.slow
def test_without_the_new_levels_own_error_in_the_bound_the_level_would_not_hold(monkeypatch):
    """The same null nights judged as if one night knew the new level exactly: several times the level."""
    monkeypatch.setattr(calibrated, "FALSE_ALARM", 0.02)
    monkeypatch.setattr(calibrated, "BRIDGE_REF_VARIANCE", 0.0)
    rate = _bridged_rate(random.Random(300 * 31 + 1), 250, 1, 300, 0.9, False)
    assert rate >= 0.06, rate


def test_a_declaration_without_history_judges_a_blow_up_against_a_few_nights_whatever_their_number():
    from airflow_metric_gate.decision.history import HistoryChoice, cold_pool

    before = [Candidate(f"b{i}", f"2026-01-{i + 1:02d}", True, {"o": "pass"}) for i in range(4)]
    recent = [Candidate(f"u{i}", f"2026-02-{i + 1:02d}", False,
                        {"o": "fail", **({"blowup": True} if i in (0, 58) else {})}) for i in range(60)]
    recent[57].marked_untrusted = True
    # the level's first night (whatever it was judged), then its latest three later nights that did not
    # blow up, none a person marked untrusted: not sixty nights of values, never the nights before it
    assert [c.run_id for c in cold_pool(HistoryChoice([], recent, bridge=before))] == ["u0", "u55", "u56", "u59"]
    assert cold_pool(HistoryChoice([], [], bridge=before)) == []  # the level's first night itself
    assert cold_pool(HistoryChoice(before[:1], recent, bridge=before[1:])) == []  # a trusted night: its history
