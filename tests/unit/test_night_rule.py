"""The opt-in whole-night rule ``night_mean_k``: the statistic by hand, validation, serialization, rendering."""

from __future__ import annotations

import pytest

from airflow_metric_gate.declarations import (
    DeclarationError,
    GateDeclaration,
    collapse_duplicates,
    declare,
    load_gates_file,
    resolve_declarations,
)
from airflow_metric_gate.evaluation import (
    FAIL,
    INACTIVE,
    NIGHT_BOUND,
    PASS,
    Result,
    constraint_params,
    judge,
    judge_night,
    night_result,
    step_z,
)
from airflow_metric_gate.report import render_report
from airflow_metric_gate.rules import night_mean_k, rule_options
from airflow_metric_gate.schemas.verdict import VerdictSchema
from airflow_metric_gate.verdict import VerdictHeader, VerdictOptions, build_verdict

C = {"rel_up": 0.5, "rel_down": 0.5}
#: median 1.0; |v - 1.0|: 0 .1 .1 .2 .2 0 .05 .05 0 0, MAD 0.05
HISTORY = [1.0, 1.1, 0.9, 1.2, 0.8, 1.0, 1.05, 0.95, 1.0, 1.0]


def _z(current, history=HISTORY, mad_k=None, min_history=1):
    judged = judge(current, history, constraint_params(C), min_history, "mean", mad_k)
    return step_z(current, history, judged)


def test_a_steps_robust_z_by_hand():
    assert _z(1.1) == pytest.approx(2.0)  # (1.1 - 1.0) / 0.05
    assert _z(0.95) == pytest.approx(-1.0)
    assert _z(1.1, mad_k=6.0) == pytest.approx(2.0)  # the mad band's median and MAD, reused
    assert _z(1.1, mad_k=1.0) == pytest.approx(2.0)  # a step that FAILs has its z too


def test_no_z_without_ten_values_a_spread_or_a_judged_status():
    assert _z(1.1, history=HISTORY[:9]) is None
    assert _z(1.1, history=[1.0] * 12) is None  # MAD 0
    assert _z(1.1, min_history=11) is None  # a cold start (INACTIVE) adds nothing
    assert judge(1.1, HISTORY, constraint_params(C), 11)[0] == INACTIVE


def test_the_night_statistic_is_the_sum_of_the_zs_over_the_root_of_their_number():
    # four steps at z = 2: 8 / sqrt(4) = 4; one step alone would be 2
    assert judge_night([2.0, 2.0, 2.0, 2.0], 3.5) == (FAIL, pytest.approx(4.0))
    assert judge_night([2.0, 2.0, 2.0, 2.0], 4.0) == (PASS, pytest.approx(4.0))  # both ends inclusive
    assert judge_night([-2.0, -2.0, -2.0, -2.0], 4.0) == (PASS, pytest.approx(-4.0))
    assert judge_night([-2.0, -2.0, -2.0, -2.0], 3.9) == (FAIL, pytest.approx(-4.0))
    assert judge_night([2.0, -2.0, 1.0, 0.0], 0.4) == (FAIL, pytest.approx(0.5))  # 1 / sqrt(4)
    assert judge_night([3.0], 2.9) == (FAIL, 3.0)
    assert judge_night([], 1.0) is None


def test_the_night_result_says_what_was_added_up():
    zs = [2.0, 2.0, 2.0, 2.0]
    r = night_result("loss", "[0,1,2,3]", "{}", zs, judge_night(zs, 3.5), 3.5)
    assert (r.step, r.at_step, r.status, r.bound, r.side, r.n) == (None, None, FAIL, NIGHT_BOUND, "above", 4)
    assert (r.current, r.ref, r.lo, r.hi) == (pytest.approx(4.0), 0.0, -3.5, 3.5)
    assert r.reason == ("whole night: the robust z ((value - median) / MAD of the step's baseline) of 4 step(s), "
                        "mean 2, x sqrt(4) = 4 is above hi 3.5 (night_mean_k); off by 0.5")
    zs = [-2.0] * 4
    low = night_result("loss", "[0,1,2,3]", "{}", zs, judge_night(zs, 3.0), 3.0)
    assert (low.side, low.reason.split(" is ")[1]) == ("below", "below lo -3 (night_mean_k); off by 1")
    ok = night_result("loss", "[0,1,2,3]", "{}", [1.0], judge_night([1.0], 3.0), 3.0)
    assert (ok.status, ok.side, ok.bound) == (PASS, None, None)
    assert ok.reason.endswith("= 1, within -+3 (night_mean_k)")


def test_the_option_is_off_by_default_and_not_serialized():
    d = declare("loss", steps="all", constraint=C)
    assert d.night_mean_k is None and "night_mean_k" not in d.to_dict() and "night_mean_k" not in d.summary()
    assert night_mean_k(d.summary()) is None


def test_the_option_round_trips_and_is_stored_with_the_declaration():
    d = declare("loss", steps="all", constraint=C, band="mad", min_failing_steps=4, night_mean_k=7)
    assert d.night_mean_k == 7.0
    assert d.rule_options() == {"min_failing_steps": 4, "band": "mad", "mad_k": 6.0, "night_mean_k": 7.0}
    assert GateDeclaration.from_dict(d.to_dict()) == d
    assert rule_options(d.summary()) == d.rule_options()
    assert night_mean_k(d.summary()) == 7.0
    alone = declare("loss", steps="all", constraint=C, night_mean_k=2.5)  # no band: mad needed
    assert alone.rule_options() == {"night_mean_k": 2.5}


@pytest.mark.parametrize(("value", "message"), [
    (0, "must be a finite number > 0, got 0"),
    (-1.0, "must be a finite number > 0, got -1.0"),
    (float("inf"), "must be a finite number > 0, got inf"),
    (True, "must be a finite number > 0, got True"),
    ("7", "must be a finite number > 0, got '7'"),
])
def test_bad_values_are_declaration_errors_naming_the_field(value, message):
    with pytest.raises(DeclarationError) as info:
        resolve_declarations([{"metric_key": "loss", "steps": "all", "constraint": C, "night_mean_k": value}])
    assert info.value.field == "night_mean_k"
    assert f"field 'night_mean_k': {message}" in str(info.value)


def test_gates_file_option(tmp_path):
    path = tmp_path / "gates.yaml"
    path.write_text("gates:\n  - metric_key: train/ppo_kl\n    night_mean_k: 7\n")
    (d,) = load_gates_file(path)
    assert d.night_mean_k == 7.0
    path.write_text("gates:\n  - metric_key: train/ppo_kl\n    night_mean_k: seven\n")
    with pytest.raises(DeclarationError, match="night_mean_k") as info:
        load_gates_file(path)
    assert info.value.line == 2


def test_a_coordinate_declared_twice_with_different_values_is_an_error():
    a = declare("loss", steps="all", constraint=C, night_mean_k=7, source="a")
    b = declare("loss", steps="all", constraint=C, source="b")
    with pytest.raises(DeclarationError, match="different night_mean_k: 7.0 at a, None at b") as info:
        collapse_duplicates([a, b])
    assert info.value.field == "night_mean_k"
    kept, warnings = collapse_duplicates([a, declare("loss", steps="all", constraint=C, night_mean_k=7.0)])
    assert kept == [a] and len(warnings) == 1


def _verdict(step_fail: bool) -> dict:
    key = ("loss", '"all"', '{"rel_up":0.5}')
    zs = [2.0] * 4
    results = []
    if step_fail:
        results.append(Result(*key, step=3, at_step=3, status=FAIL, current=2.0, ref=1.0, n=10, lo=0.5, hi=1.5,
                              side="above", bound="rel", reason="2 is above hi 1.5"))
    results.append(night_result(*key, zs, judge_night(zs, 3.5), 3.5))
    counts = {PASS: 4 - step_fail, FAIL: 1 + step_fail, INACTIVE: 0, "ERROR": 0}
    header = VerdictHeader(series="s", backend="b", suite="n", run_id="r", role="baseline",
                           logical_date="2026-01-01", trusted=False, enforced=True, blocking=len(results))
    return build_verdict(header, results, VerdictOptions(counts=counts, declaration_counts={key: counts}))


def test_a_failing_night_alone_is_summarized_and_rendered():
    verdict = _verdict(step_fail=False)
    [entry] = verdict["summary"]
    assert entry["worst"] is None and entry["error"] is None and entry["side"] == "above"
    assert entry["night"] == {"statistic": pytest.approx(4.0), "night_mean_k": 3.5, "steps": 4, "side": "above",
                              "distance": pytest.approx(0.5 / 3.5)}
    assert (entry["first_failing_step"], entry["last_failing_step"]) == (None, None)
    VerdictSchema().load(verdict)
    report = render_report(verdict)
    assert report.summary[0] == (
        'REGRESSED loss (steps "all"): 0 of 4 steps FAIL, above band, whole night above its band: robust z of '
        "4 steps, summed / sqrt(n), 4 vs -+3.5 (night_mean_k)"
    )
    assert "above, night_mean" in report.table


def test_a_failing_night_beside_a_failing_step_keeps_the_step_as_the_worst():
    verdict = _verdict(step_fail=True)
    [entry] = verdict["summary"]
    assert entry["worst"]["step"] == 3 and entry["night"]["steps"] == 4
    assert (entry["first_failing_step"], entry["last_failing_step"]) == (3, 3)
    line = render_report(verdict).summary[0]
    assert line.startswith('REGRESSED loss (steps "all"): 1 of 4 steps FAIL, step 3, above band, worst step 3: 2 vs')
    assert line.endswith("whole night above its band: robust z of 4 steps, summed / sqrt(n), 4 vs -+3.5 (night_mean_k)")
    assert sorted(r["bound"] for r in verdict["results"]) == ["night_mean", "rel"]


def test_the_ui_summary_sentence_names_a_failing_night():
    from airflow_metric_gate.plugins.data import summary_text

    [entry] = _verdict(step_fail=False)["summary"]
    assert summary_text(entry) == ("loss (steps all): 1 FAIL, above the band; whole night above its band: 4 vs -+3.5 "
                                   "(night_mean_k, 4 steps)")
