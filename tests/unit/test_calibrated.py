"""The calibrated policy's night decision (airflow_metric_gate.decision.calibrated), without a store."""

from __future__ import annotations

import math
import random

import pytest
from _null_nights import night_noise

from airflow_metric_gate.decision import blocks, direction_of
from airflow_metric_gate.decision.calibrated import (
    SHIFT_ADOPT,
    Candidate,
    choose_history,
    judge_declaration,
    night_trusted,
)
from airflow_metric_gate.decision.parameters import MANY_STEPS
from airflow_metric_gate.decision.stats import t_cdf, t_quantile, trimmed_mean
from airflow_metric_gate.enums import ERROR, FAIL, INACTIVE, PASS
from airflow_metric_gate.selection import LAST_STEP

KEY = ("train/loss", '"all"', '{"rel_down":0.1,"rel_up":0.1}')
GATE = {"metric_key": KEY[0], "steps_key": KEY[1], "constraint_key": KEY[2],
        "constraint": {"rel_up": 0.1, "abs_floor_up": 0.0, "rel_down": 0.1, "abs_floor_down": 0.0}, "enforce": True,
        "allowlist_reason": None, "policy": "calibrated", "direction": "up"}


def _nights(rng, count, steps, shared, *, heavy=False, level=1.0):
    """Nights of a declaration: every step's value is 10 + half of (shared night factor + own noise)."""
    return [{s: level * (10.0 + 0.5 * x) for s, x in enumerate(night)}
            for night in night_noise(rng, count, steps, shared, heavy=heavy)]


def _judge(history, tonight, gate=GATE, recent=()):
    cands = [Candidate(f"r{i}", f"2026-01-{i + 1:02d}", True, {"o": "pass"}, v) for i, v in enumerate(history)]
    choice = choose_history(cands, 20)
    choice.recent = list(recent)
    rows = [(s, s, v) for s, v in sorted(tonight.items())]
    return judge_declaration(KEY, gate, rows, choice, run_id="tonight", logical_date="2026-02-01")


def test_t_quantiles_and_trimmed_mean():
    assert t_quantile(0.975, 10) == pytest.approx(2.228, abs=1e-3)
    assert t_quantile(0.999, 4) == pytest.approx(7.173, abs=1e-3)
    assert t_cdf(t_quantile(0.99, 7.0), 7.0) == pytest.approx(0.99, abs=1e-9)
    assert trimmed_mean([1, 2, 3, 4, 100]) == pytest.approx(3.0)  # one spike in five is cut


@pytest.mark.slow
@pytest.mark.parametrize(("steps", "shared", "heavy", "trials"), [
    (10, 0.0, False, 400), (10, 0.9, True, 400), (300, 0.0, True, 150), (300, 0.5, False, 150),
    (300, 0.9, True, 150), (2000, 0.9, False, 30),
])
def test_false_alarms_stay_at_their_level_whatever_the_steps_and_the_shared_variation(steps, shared, heavy, trials):
    rng = random.Random(steps * 7 + int(shared * 10) + heavy)
    alarms = 0
    for _ in range(trials):
        *history, tonight = _nights(rng, 21, steps, shared, heavy=heavy)
        alarms += _judge(history, tonight).outcome != "pass"
    # every test of the policy together alarms on about 0.06 % of clean nights: too rare to measure
    # here, so this only shows that nothing is far off; the level itself is measured below
    assert alarms / trials <= 0.02, (alarms, trials)


@pytest.mark.slow
@pytest.mark.parametrize(("steps", "shared", "heavy", "trials"), [
    (10, 0.0, False, 1000), (10, 0.9, True, 1000), (300, 0.0, True, 500), (300, 0.5, False, 500),
    (300, 0.9, True, 500), (2000, 0.9, False, 200),
])
def test_the_night_test_alarms_at_its_level_whatever_the_steps_and_the_shared_variation(
        monkeypatch, steps, shared, heavy, trials):
    """The night test's level set to 5 % (measurable in a few hundred nights), the other tests off: on
    null nights it alarms on 5 % of them within the trials' own noise, from 10 to 2,000 steps a night
    and a shared share of the variance from 0 to 0.9, heavy tails or not.  Below 20 steps its bound
    takes heavy tails for granted (at most 6 degrees of freedom): fewer alarms, never more."""
    from airflow_metric_gate.decision import calibrated, night_tests

    level = 0.05
    monkeypatch.setattr(calibrated, "FALSE_ALARM", level)
    for other in ("SUSTAINED_FALSE_ALARM", "DRIFT_FALSE_ALARM", "SHAPE_FALSE_ALARM"):
        monkeypatch.setattr(night_tests, other, 1e-12)
    rng = random.Random(1000 + steps * 7 + int(shared * 10) + heavy)
    alarms = 0
    for _ in range(trials):
        *history, tonight = _nights(rng, 21, steps, shared, heavy=heavy)
        decision = _judge(history, tonight)
        if decision.outcome != "pass":
            assert decision.results[-1].bound == "night", decision.results[-1]
            alarms += 1
    rate, noise = alarms / trials, 3.3 * math.sqrt(level * (1 - level) / trials)  # 3.3 sd: 0.1 % each side
    assert rate <= level + noise, (rate, level + noise)
    if steps >= MANY_STEPS and trials >= 500:
        assert rate >= level - noise, (rate, level - noise)  # at its level, not merely below it


def test_an_independence_assumption_would_not_hold_where_the_calibration_does():
    """The same null data, judged by mean z x sqrt(n) (steps taken as independent), alarms on most nights."""
    rng = random.Random(3)
    alarms = 0
    for _ in range(50):
        *history, tonight = _nights(rng, 21, 300, 0.5)
        zs = []
        for s, v in tonight.items():
            column = [h[s] for h in history]
            mean = sum(column) / len(column)
            sd = math.sqrt(sum((c - mean) ** 2 for c in column) / (len(column) - 1))
            zs.append((v - mean) / sd)
        alarms += abs(sum(zs) / math.sqrt(len(zs))) > 4.0
    assert alarms >= 20


def test_a_shift_on_the_regression_side_fails_and_an_improvement_passes():
    rng = random.Random(11)
    *history, tonight = _nights(rng, 21, 300, 0.5)
    worse = _judge(history, {s: v * 1.2 for s, v in tonight.items()})  # a loss up 20 %
    assert worse.outcome == "fail" and worse.report["side"] == "above"
    night = worse.results[-1]
    assert (night.step, night.status, night.bound) == (None, FAIL, "night") and "level +" in night.reason
    assert sum(r.status == FAIL for r in worse.results[:-1]) > 200  # the steps that drove it
    better = _judge(history, {s: v * 0.8 for s, v in tonight.items()})
    assert better.outcome == "pass" and better.report["improvement"]["side"] == "below"
    assert better.results[-1].bound == "improvement" and better.results[-1].status == PASS
    both = _judge(history, {s: v * 0.8 for s, v in tonight.items()}, gate={**GATE, "direction": "both"})
    assert both.outcome == "fail" and both.report["side"] == "below"


def test_directions_of_the_defaults_table_and_declared_ones():
    assert direction_of({"metric_key": "rollout/raw_reward"}) == "down"
    assert direction_of({"metric_key": "train/grad_norm"}) == "up"
    assert direction_of({"metric_key": "eval/accuracy"}) == "both"
    assert direction_of({"metric_key": "eval/accuracy", "direction": "down"}) == "down"


def test_faults_that_need_no_history_are_judged_on_the_first_night_with_any():
    rng = random.Random(5)
    history, tonight = _nights(rng, 1, 50, 0.0), _nights(rng, 1, 50, 0.0)[0]
    calm = _judge(history, tonight)
    assert calm.outcome == "inactive" and {r.status for r in calm.results} == {INACTIVE}
    assert "calibrating: 1 trusted night(s), 5 needed" in calm.results[0].reason
    blown = _judge(history, {s: v * 10 for s, v in tonight.items()})  # lr x10
    assert blown.outcome == "fail" and blown.results[-1].bound == "blowup"
    halved = _judge(history, {s: v * 1.5 for s, v in tonight.items()})  # beyond the constraint's +10 %
    assert halved.outcome == "fail" and halved.results[-1].bound == "constraint"
    assert "calibrating (1 of 5 trusted nights)" in halved.results[-1].reason
    better = _judge(history, {s: v * 0.7 for s, v in tonight.items()})  # the good side: not a regression
    assert better.outcome == "inactive"
    short = _judge(history, {s: v for s, v in tonight.items() if s < 30})  # the night ended early
    assert short.outcome == "error" and short.results[0].status == ERROR
    assert "20 steps (30 to 49) missing from tonight's record" in short.results[0].reason
    cold = _judge([], tonight)
    assert cold.outcome == "inactive" and "cold start" in cold.results[0].reason
    # no trusted night yet, but an untrusted one (the first night erred, say): a blow-up is still one
    first = Candidate("first", "2026-01-31", False, {"o": "error"}, history[0])
    blown_cold = _judge([], {s: v * 10 for s, v in tonight.items()}, recent=[first])
    assert blown_cold.outcome == "fail" and blown_cold.results[-1].bound == "blowup"
    assert "beyond anything their 1 untrusted night(s) of this level had" in blown_cold.results[-1].reason
    assert _judge([], tonight, recent=[first]).outcome == "inactive"  # a calm night: still a cold start
    # an untrusted night that blew up itself widens nothing: the next blow-up is judged without it
    tenfold = {s: v * 10 for s, v in tonight.items()}
    blew = Candidate("blew", "2026-02-01", False, {"o": "fail", "blowup": True}, tenfold)
    assert _judge([], tenfold, recent=[first, blew]).outcome == "fail"


def test_a_level_shift_pages_once_then_continues_then_is_adopted():
    rng = random.Random(8)
    *history, tonight = _nights(rng, 21, 100, 0.3)
    first = _judge(history, {s: v * 1.3 for s, v in tonight.items()})
    assert first.outcome == "fail" and first.report["shift"]["continues"] is False
    assert blocks(FAIL, GATE, enforce=False, outcome=first.outcome)
    prior = Candidate("tonight", "2026-02-01", False, first.stored)
    second = _judge(history, {s: v * 1.3 for s, v in _nights(rng, 1, 100, 0.3)[0].items()}, recent=[prior])
    assert second.outcome == "shift" and second.report["shift"]["since_run_id"] == "tonight"
    assert second.report["shift"]["nights"] == 2 and "night 2, reported on its first night" in second.results[-1].reason
    assert not blocks(FAIL, GATE, enforce=True, outcome=second.outcome)  # reported once, pages once
    # after SHIFT_ADOPT failing nights of one shift, the shift is the history
    trusted = [Candidate(f"t{i}", f"2026-01-{i + 1:02d}", True, {"o": "pass"}) for i in range(10)]
    shift = [Candidate(f"s{i}", f"2026-02-{i + 1:02d}", False, {"o": "shift" if i else "fail", "since": "s0"})
             for i in range(SHIFT_ADOPT)]
    choice = choose_history(trusted + shift, 20)
    assert choice.adopted is not None and [c.run_id for c in choice.history] == [c.run_id for c in shift]
    assert choose_history(trusted + shift[:-1], 20).adopted is None


def test_a_once_a_night_metric_is_judged_against_its_own_night_to_night_variation():
    """A mismatch rate (one value a night, the defaults table's band: +100 % and 0.1 absolute): a 1.5x
    night, far inside that band, fails when the rate moves by 3 % from night to night, and passes when
    it moves by 40 %; the night test is the same, its spread is each metric's own."""
    metric = "rollout/tito_session_mismatch_rate/v1/assistant_text"
    key = (metric, '"last"', '{"abs_floor_up":0.1,"rel_down":1.0,"rel_up":1.0}')
    gate = {**GATE, "metric_key": metric, "steps_key": key[1], "constraint_key": key[2],
            "constraint": {"rel_up": 1.0, "abs_floor_up": 0.1, "rel_down": 1.0, "abs_floor_down": 0.0},
            "direction": direction_of({"metric_key": metric})}
    assert gate["direction"] == "up"

    def judge(spread, factor, seed):
        rng = random.Random(seed)
        nights = [{LAST_STEP: 0.02 * math.exp(rng.gauss(0.0, spread))} for _ in range(21)]
        cands = [Candidate(f"r{i}", f"2026-01-{i + 1:02d}", True, {"o": "pass"}, v) for i, v in enumerate(nights[:-1])]
        tonight = [(LAST_STEP, 300, nights[-1][LAST_STEP] * factor)]
        return judge_declaration(key, gate, tonight, choose_history(cands, 20), run_id="tonight",
                                 logical_date="2026-02-01")

    quiet = [judge(0.03, 1.5, seed) for seed in range(20)]
    assert all(d.outcome == "fail" and d.results[-1].bound == "night" for d in quiet), [d.outcome for d in quiet]
    assert "1 step(s)" in quiet[0].results[-1].reason
    noisy = [judge(0.4, 1.5, seed) for seed in range(20)]
    assert all(d.outcome == "pass" for d in noisy), [d.outcome for d in noisy]
    # and the quiet rate's clean nights, and its 1.5x drop (the good side), pass
    assert all(judge(0.03, 1.0, seed).outcome == "pass" for seed in range(20))
    assert all(judge(0.03, 1 / 1.5, seed).outcome == "pass" for seed in range(20))


def test_a_night_decision_names_the_last_step_last():
    """A ``steps: last`` declaration keys its one step LAST_STEP (-1); the night's reason says ``last``."""
    cands = [Candidate("r0", "2026-01-01", True, {"o": "pass"}, {LAST_STEP: 1.0})]
    decision = judge_declaration(KEY, GATE, [(LAST_STEP, 300, 2.0)], choose_history(cands, 20), run_id="tonight",
                                 logical_date="2026-02-01")
    assert decision.outcome == "fail" and decision.results[-1].bound == "constraint"
    assert "step(s) last (1 of 1)" in decision.results[-1].reason and "-1" not in decision.results[-1].reason


def test_a_slow_regression_inside_every_band_is_reported_as_drift():
    rng = random.Random(21)
    base = _nights(rng, 20, 100, 0.8)
    drifting = [{s: v * (1 + 0.01 * (i + 1)) for s, v in night.items()} for i, night in enumerate(_nights(rng, 15, 100,
                                                                                                        0.8))]
    history = list(base)
    found = None
    for night, values in enumerate(drifting):
        decision = _judge(history[-20:], values)
        if decision.outcome in ("drift", "fail"):
            found = (night, decision)
            break
        history.append(values)
    assert found is not None and found[0] < 12, found
    night, decision = found
    if decision.outcome == "drift":
        assert decision.report["drift"]["cumulative"] > 0.03 and decision.results[-1].bound == "drift"
        assert decision.report["drift"]["since_run_id"] == "tonight"  # what an accept of it starts from


def test_the_notice_lines_offer_the_accept_for_a_drift_and_a_night_worse_within_itself():
    from airflow_metric_gate.report import notice_lines

    verdict = {"series": "rl-7b", "backend": "cuda", "suite": "nightly",
               "drifts": [{"metric_key": "rollout/raw_reward", "steps_key": '"all"', "start": "2026-11-02",
                           "slope": -0.01, "cumulative": -0.05, "since_run_id": "af-9"}],
               "within_night": [{"metric_key": "train/grad_norm", "steps_key": '"all"', "from_step": 150,
                                 "since": "2026-11-06", "since_run_id": "af-7", "continues": True}]}
    drift, worse = notice_lines(verdict)
    assert drift == ('DRIFT rollout/raw_reward (steps "all") since 2026-11-02: -1.00 % a night, -5.0 % in all. '
                     "If the level it reached is right: metric-gate accept --series rl-7b --backend cuda --suite "
                     "nightly --since af-9 --reason '...'")
    assert worse == ('WORSE WITHIN THE NIGHT train/grad_norm (steps "all"): from step 150 on, against the steps '
                     "before it (since 2026-11-06, continues). If the new shape is right: metric-gate accept "
                     "--series rl-7b --backend cuda --suite nightly --since af-7 --reason '...'")
    # a verdict of an earlier release (no run id for the drift): the line, without a command it cannot give
    del verdict["drifts"][0]["since_run_id"]
    assert notice_lines(verdict)[0].endswith("-5.0 % in all")


def test_trust_per_declaration_and_marks():
    assert night_trusted("untrusted", None, {"o": "pass"})  # another declaration failed that night
    assert not night_trusted("untrusted", None, {"o": "fail"})
    assert not night_trusted("trusted", "untrusted", {"o": "pass"})  # a person's mark wins
    assert night_trusted("untrusted", "trusted", {"o": "error"})
    assert night_trusted("trusted", None, None)  # judged before outcomes were stored: the run decides


def test_blocking_is_decided_in_one_place():
    gate = {**GATE, "enforce": False}
    assert not blocks(FAIL, gate, enforce=False) and blocks(FAIL, gate, enforce=True)
    assert not blocks(FAIL, {**GATE, "severity": "warn"}, enforce=True)
    assert not blocks(ERROR, {**GATE, "allowlist_reason": "known"}, enforce=True)
    assert not blocks(PASS, GATE, enforce=True)


def test_the_shadow_rule_is_decided_in_one_place():
    """A shadow run only reports; the operators, the approval and the notices ask reports_only, and no
    other module of the package compares anything with "shadow" by itself, on either side or in a
    tuple, but the chart data, which draws a shadow run's point its own way (a look, not a rule)."""
    import ast
    from pathlib import Path

    import airflow_metric_gate
    from airflow_metric_gate.decision.policy import reports_only

    assert reports_only({"role": "shadow"}) and not reports_only({"role": "baseline"})
    assert not reports_only(None) and not reports_only("shadow")  # an XCom that held no verdict
    package = Path(airflow_metric_gate.__file__).parent
    allowed = {"decision/policy.py", "plugins/data.py"}  # the rule itself; a chart point's look
    found = []
    for path in sorted(package.rglob("*.py")):
        where = path.relative_to(package).as_posix()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Compare) and any(
                    isinstance(c, ast.Constant) and c.value == "shadow"
                    for operand in [node.left, *node.comparators] for c in ast.walk(operand)):
                found.append(f"{where}:{node.lineno}")
    assert {f.split(":")[0] for f in found} <= allowed, f"the shadow rule re-derived at {found}: ask reports_only"
    assert any(f.startswith("plugins/data.py:") for f in found)  # the scan sees comparisons at all


def test_a_value_that_is_not_a_number_is_an_error_under_calibrated_and_a_warning_under_reference(tmp_path):
    import json

    from airflow_metric_gate.declarations import declare
    from airflow_metric_gate.records import read_record
    from airflow_metric_gate.selection import select_steps

    path = tmp_path / "night.jsonl"
    path.write_text(json.dumps({"metric": "train/grad_norm", "series": [[0, None], [1, 1.1], [2, "nan"]]}) + "\n")
    record = read_record(path)
    reference = select_steps(record, [declare("train/grad_norm", steps="all")])[0]
    assert reference.error is None and reference.steps == [1]  # the reference gate drops them
    calibrated = select_steps(record, [declare("train/grad_norm", steps="all", policy="calibrated")])[0]
    assert calibrated.error == (f"metric 'train/grad_norm': step 0 has the value null ({path} line 1), which is not "
                                "a number (policy calibrated: an ERROR, not a dropped point); 1 more such point(s)")
    last = select_steps(record, [declare("train/grad_norm", steps="last", policy="calibrated")])[0]
    assert last.error is not None and 'step 2, has the value "nan"' in last.error


def _sequence(nights):
    """Judge nights one after another as evaluate does, each against the trusted ones before it."""
    cands, decisions = [], []
    for i, values in enumerate(nights):
        choice = choose_history(cands, 20)
        decision = judge_declaration(KEY, GATE, [(s, s, v) for s, v in sorted(values.items())], choice,
                                     run_id=f"r{i}", logical_date=f"night-{i:03d}")
        decisions.append(decision)
        cands.append(Candidate(f"r{i}", f"night-{i:03d}", decision.outcome in ("pass", "inactive"), decision.stored,
                               values))
    return decisions


def test_a_shift_too_small_for_one_night_is_caught_when_it_holds():
    rng = random.Random(13)
    clean = _nights(rng, 25, 100, 0.9)  # the steps move together: one night's band is wide
    spread = 0.5 * math.sqrt(0.9 + 0.1 / 100) / 10.0  # the night level's relative spread
    shifted = [{s: v * (1 + 3.5 * spread) for s, v in n.items()} for n in _nights(rng, 3, 100, 0.9)]
    decisions = _sequence(clean + shifted)
    assert all(d.outcome in ("pass", "inactive") for d in decisions[:25])
    caught = [i for i, d in enumerate(decisions[25:]) if d.outcome == "fail"]
    assert caught and caught[0] <= 2, [(d.outcome, round(d.report.get("z", 0), 2)) for d in decisions[25:]]
    first = decisions[25 + caught[0]]
    if caught[0] > 0:  # caught by adding up the nights in a row, not by tonight alone
        assert first.report["sustained"]["nights"] == caught[0] + 1 or first.report["z"] > first.report["threshold"]


def test_the_leave_one_out_median_is_the_median_of_the_others():
    import statistics

    from airflow_metric_gate.decision.deviations import _LeaveOneOut

    rng = random.Random(3)
    for _ in range(5000):
        column = sorted(rng.choice([rng.random(), 0.5, 1.0]) for _ in range(rng.randint(2, 25)))
        i = rng.randrange(len(column))
        assert _LeaveOneOut(column).median_without(column[i]) == pytest.approx(
            statistics.median(column[:i] + column[i + 1:]), abs=1e-12)


def test_a_night_that_gets_worse_part_way_fails_within_the_night_and_a_uniform_move_does_not():
    rng = random.Random(21)
    history = _nights(rng, 25, 100, 0.9)  # the steps move together: the night level alone cannot see it
    own_sd = 0.5 * math.sqrt(0.1)
    tonight = _nights(rng, 1, 100, 0.9)[0]
    worse = {s: v + (3.0 * own_sd if s >= 50 else 0.0) for s, v in tonight.items()}
    decision = _judge(history, worse)
    assert decision.outcome == "fail", decision.report.get("z")
    assert decision.report["shape"]["from_step"] in (25, 50, 75)
    night = decision.results[-1]
    assert night.step is None and night.bound == "shape" and "from step" in night.reason
    assert {r.step for r in decision.results if r.status == FAIL and r.step is not None} <= set(range(25, 100))
    # the same average change on every step is a level change, which the night test judges (it passes here)
    uniform = {s: v + 1.5 * own_sd for s, v in tonight.items()}
    assert _judge(history, uniform).outcome == "pass"


def test_positive_values_are_judged_on_the_log_scale():
    rng = random.Random(5)
    history = [{s: math.exp(rng.gauss(0.0, 1.0)) for s in range(30)} for _ in range(20)]
    tonight = {s: math.exp(rng.gauss(0.0, 1.0)) for s in range(30)}
    decision = _judge(history, tonight)
    assert decision.report["scale"] == "log"
    step = next(r for r in decision.results if r.step is not None and r.lo is not None)
    assert step.lo > 0.0 and step.hi - step.ref > 2.0 * (step.ref - step.lo)  # a band of ratios, not of differences
    shifted = [{s: v - 1.0 for s, v in n.items()} for n in history]  # some values at or below zero
    assert _judge(shifted, {s: v - 1.0 for s, v in tonight.items()}).report["scale"] == "linear"


def test_a_drift_goes_on_only_while_the_nights_since_it_stay_off_the_anchor():
    from airflow_metric_gate.decision.night_tests import _drift

    rng = random.Random(3)
    # the eight last trusted nights drifted up 1 % a night (every one within its own band)
    levels = [rng.gauss(0.0, 0.01) for _ in range(12)] + [0.01 * (i + 1) + rng.gauss(0.0, 0.01) for i in range(8)]
    history = [Candidate(f"r{i}", f"night-{i:02d}", True) for i in range(len(levels))]
    # without the untrusted nights since, the drifted trusted nights would keep the drift going forever
    assert _drift("up", levels, 0.09, history, "tonight", few_steps=False) is not None
    # the nights since the report (untrusted, judged against the same history) are back at the anchor: it ends
    assert _drift("up", levels, 0.0, history, "tonight", few_steps=False, recent_levels=[0.001, -0.002],
                  recent_dates=["a", "b"]) is None
    drift = _drift("up", levels, 0.11, history, "tonight", few_steps=False, recent_levels=[0.09, 0.1],
                   recent_dates=["a", "b"])
    assert drift is not None and drift["start"] == "night-13" and drift["nights"] == 10
    assert 0.005 < drift["slope"] < 0.02 and abs(drift["cumulative"] - 10 * drift["slope"]) < 1e-12


def test_a_night_worse_within_the_night_again_continues_without_paging():
    rng = random.Random(21)
    history = _nights(rng, 25, 100, 0.9)
    own_sd = 0.5 * math.sqrt(0.1)
    first_values, second_values = (
        {s: v + (3.0 * own_sd if s >= 50 else 0.0) for s, v in n.items()} for n in _nights(rng, 2, 100, 0.9))
    first = _judge(history, first_values)
    assert first.outcome == "fail" and first.stored["shape"]
    earlier = Candidate("tonight", "2026-02-01", False, first.stored, first_values)
    second = _judge(history, second_values, recent=[earlier])
    assert second.outcome == "shift", second.report.get("shape")
    assert second.report["shape"]["continues"] and second.report["shape"]["since_run_id"] == "tonight"
    assert not blocks("FAIL", GATE, enforce=True, outcome=second.outcome)


def test_nights_that_keep_leaving_the_prior_band_are_a_level_shift_not_a_lock_out():
    """After a cold start or an accept, one trusted night is the baseline and the constraint's band the
    prior: a legitimate new level that leaves it on every night pages once, continues without paging,
    and is adopted after SHIFT_ADOPT nights, like any level shift; before, it failed every night and
    never fed its own baseline (a clean year of CartPole training paged 80 nights in a row).
    """
    rng = random.Random(5)
    (base,) = _nights(rng, 1, 100, 0.3)
    baseline = [Candidate("b0", "2026-01-01", True, {"o": "pass"}, base)]
    later = [{s: v * 1.5 for s, v in night.items()} for night in _nights(rng, SHIFT_ADOPT + 4, 100, 0.3)]
    recent: list[Candidate] = []
    outcomes = []
    for i, values in enumerate(later):
        choice = choose_history(baseline + recent, 20)
        rows = [(s, s, v) for s, v in sorted(values.items())]
        decision = judge_declaration(KEY, GATE, rows, choice, run_id=f"n{i}", logical_date=f"2026-01-{i + 2:02d}")
        outcomes.append(decision.outcome)
        if i == 0:
            assert decision.outcome == "fail" and decision.report["shift"]["since_run_id"] == "n0"
            assert decision.report["shift"]["continues"] is False
            assert "calibrating" in decision.results[-1].reason and decision.results[-1].bound == "constraint"
            assert blocks(FAIL, GATE, enforce=True, outcome=decision.outcome)  # it pages, once
        elif i < SHIFT_ADOPT:
            assert decision.outcome == "shift", (i, decision.outcome)
            assert decision.report["shift"] == {**decision.report["shift"], "since_run_id": "n0", "nights": i + 1,
                                                "continues": True}
            assert f"night {i + 1}" in decision.results[-1].reason
            assert not blocks(FAIL, GATE, enforce=True, outcome=decision.outcome)
        elif i == SHIFT_ADOPT:  # the SHIFT_ADOPT nights of the new level are the history now: the night test judges it
            assert choice.adopted is not None and choice.adopted.run_id == "n0"
            assert [c.run_id for c in choice.history] == [f"n{k}" for k in range(SHIFT_ADOPT)]
            assert decision.outcome == "pass", decision.results[-1].reason
            assert decision.stored["adopted_since"] == "n0"
        else:  # and it stays adopted: the old night never comes back into the history
            assert choice.adopted is None and [c.run_id for c in choice.history] == [f"n{k}" for k in range(i)]
            assert decision.outcome == "pass", decision.results[-1].reason
        recent.append(Candidate(f"n{i}", f"2026-01-{i + 2:02d}", decision.outcome in ("pass", "inactive"),
                                decision.stored, values))
    assert outcomes == ["fail"] + ["shift"] * (SHIFT_ADOPT - 1) + ["pass"] * 4


def test_a_prior_band_failure_on_the_other_side_starts_a_new_shift():
    rng = random.Random(6)
    (base,) = _nights(rng, 1, 100, 0.3)
    baseline = [Candidate("b0", "2026-01-01", True, {"o": "pass"}, base)]
    gate = {**GATE, "direction": "both"}
    up, down = ({s: v * f for s, v in night.items()} for f, night in zip((1.5, 0.5), _nights(rng, 2, 100, 0.3)))
    first = judge_declaration(KEY, gate, [(s, s, v) for s, v in sorted(up.items())], choose_history(baseline, 20),
                              run_id="n0", logical_date="2026-01-02")
    assert first.outcome == "fail" and first.stored["side"] == "above"
    choice = choose_history(baseline + [Candidate("n0", "2026-01-02", False, first.stored, up)], 20)
    second = judge_declaration(KEY, gate, [(s, s, v) for s, v in sorted(down.items())], choice,
                               run_id="n1", logical_date="2026-01-03")
    assert second.outcome == "fail" and second.stored["side"] == "below" and second.stored["since"] == "n1"


def test_a_blow_up_that_stays_pages_once_and_is_adopted_after_shift_adopt_nights():
    rng = random.Random(9)
    history = _nights(rng, 10, 50, 0.3)
    trusted = [Candidate(f"t{i}", f"2026-01-{i + 1:02d}", True, {"o": "pass"}, v) for i, v in enumerate(history)]
    recent: list[Candidate] = []
    outcomes = []
    for i, night in enumerate(_nights(rng, SHIFT_ADOPT + 3, 50, 0.3)):
        values = {s: 20.0 * v for s, v in night.items()}  # every step 20x: far beyond anything trusted
        choice = choose_history(trusted + recent, 20)
        decision = judge_declaration(KEY, GATE, [(s, s, v) for s, v in sorted(values.items())], choice,
                                     run_id=f"n{i}", logical_date=f"2026-02-{i + 1:02d}")
        outcomes.append(decision.outcome)
        if i < SHIFT_ADOPT:
            assert decision.results[-1].bound == "blowup" and decision.report["blowup"]["since_run_id"] == "n0"
            assert decision.report["blowup"]["nights"] == i + 1
            # listed as a level shift too: the log and the UI offer the accept
            assert decision.report["shift"]["since_run_id"] == "n0" and decision.report["shift"]["change"] > 10
            assert blocks(FAIL, GATE, enforce=True, outcome=decision.outcome) == (i == 0)  # it pages once
        elif i == SHIFT_ADOPT:
            assert choice.adopted is not None and choice.adopted.run_id == "n0"
        else:  # the blown-up level stays the baseline: the ten old nights do not come back
            assert {c.run_id for c in choice.history}.isdisjoint(c.run_id for c in trusted)
        recent.append(Candidate(f"n{i}", f"2026-02-{i + 1:02d}", decision.outcome in ("pass", "inactive"),
                                decision.stored, values))
    assert outcomes == ["fail"] + ["shift"] * (SHIFT_ADOPT - 1) + ["pass"] * 3


def test_an_adopted_night_test_shift_stays_adopted():
    """The night test's level shift, adopted after SHIFT_ADOPT nights without an accept, is the baseline
    from then on: the night after the adoption is not judged against the old nights again."""
    rng = random.Random(12)
    history = _nights(rng, 20, 100, 0.3)
    nights = [Candidate(f"t{i}", f"2026-01-{i + 1:02d}", True, {"o": "pass"}, v) for i, v in enumerate(history)]
    outcomes, pages = [], []
    for i, night in enumerate(_nights(rng, SHIFT_ADOPT + 4, 100, 0.3)):
        values = {s: 1.3 * v for s, v in night.items()}  # a new level, 30 % up, for good
        choice = choose_history(nights, 20)
        decision = judge_declaration(KEY, GATE, [(s, s, v) for s, v in sorted(values.items())], choice,
                                     run_id=f"n{i}", logical_date=f"2026-02-{i + 1:02d}")
        outcomes.append(decision.outcome)
        pages.append(blocks(FAIL, GATE, enforce=True, outcome=decision.outcome) and decision.outcome != "pass")
        nights.append(Candidate(f"n{i}", f"2026-02-{i + 1:02d}", decision.outcome in ("pass", "inactive"),
                                decision.stored, values))
    assert outcomes == ["fail"] + ["shift"] * (SHIFT_ADOPT - 1) + ["pass"] * 4, outcomes
    assert pages == [True] + [False] * (SHIFT_ADOPT + 3)


def test_a_blow_up_then_a_prior_failure_the_same_way_is_one_shift():
    rng = random.Random(13)
    (base,) = _nights(rng, 1, 100, 0.3)
    nights = [Candidate("b0", "2026-01-01", True, {"o": "pass"}, base)]
    first, second = ({s: f * v for s, v in night.items()} for f, night in zip((6.0, 3.0), _nights(rng, 2, 100, 0.3)))
    blown = judge_declaration(KEY, GATE, [(s, s, v) for s, v in sorted(first.items())], choose_history(nights, 20),
                              run_id="n0", logical_date="2026-01-02")
    assert blown.outcome == "fail" and blown.stored["blowup"] and blown.stored["side"] == "above"
    nights.append(Candidate("n0", "2026-01-02", False, blown.stored, first))
    prior = judge_declaration(KEY, GATE, [(s, s, v) for s, v in sorted(second.items())], choose_history(nights, 20),
                              run_id="n1", logical_date="2026-01-03")
    assert prior.results[-1].bound == "constraint" and prior.outcome == "shift"
    assert prior.stored["since"] == "n0" and prior.stored["nights"] == 2
