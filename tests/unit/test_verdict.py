"""The verdict's per-declaration summary, its worst-first order, and its rendering (SPEC 10)."""

from __future__ import annotations

import json

import pytest

from airflow_metric_gate.evaluation import error_result, evaluate_value
from airflow_metric_gate.report import render_report
from airflow_metric_gate.schemas.verdict import VerdictSchema
from airflow_metric_gate.verdict import (
    DISTANCE_MAX,
    DISTANCE_TINY,
    XCOM_MAX_BYTES,
    VerdictHeader,
    VerdictOptions,
    band_distance,
    build_verdict,
)

REL = {"rel_up": 0.2, "rel_down": 0.2}
WIDE = {"rel_up": 0.5, "rel_down": 0.5}
ALL = '"all"'
LAST = '"last"'
WORST = {99: 0.55, 100: 0.4, 101: 0.45, 102: 0.5, 103: 0.55}


def _result(metric, step, current, ref, constraint=REL, steps_key=ALL, at_step=None):
    return evaluate_value(
        metric_key=metric, steps_key=steps_key, constraint_key=json.dumps(constraint, sort_keys=True), step=step,
        at_step=step if at_step is None else at_step, current=current, history=[ref] * 5, constraint=constraint,
    )


def _regressed_results():
    """A regressed night: the reward collapses from step 40 (80 of 120 steps), worst at step 100;
    the gradient norm's last value doubles; the KL could not be selected."""
    reward = [_result("rollout/raw_reward", s, 0.8 if s < 40 else WORST.get(s, 0.6), 0.8) for s in range(120)]
    grad = [_result("train/grad_norm", -1, 2.0, 1.0, WIDE, steps_key=LAST, at_step=119)]
    kl = [error_result("train/ppo_kl", ALL, json.dumps(REL, sort_keys=True), "metric 'train/ppo_kl' is absent")]
    return reward + grad + kl


def _verdict(results, **kwargs):
    blocking = sum(1 for r in results if r.status in ("FAIL", "ERROR"))
    header = VerdictHeader(series="rl-7b", backend="cuda", suite="nightly", run_id="af-1", role="baseline",
                           logical_date="2026-11-29T00:00:00+00:00", trusted=blocking == 0, enforced=True,
                           blocking=blocking)
    return build_verdict(header, results, VerdictOptions(**kwargs))


def test_distance_is_the_excess_over_the_band_relative_to_the_baseline():
    assert band_distance(0.4, 0.8, 0.64, 0.96) == pytest.approx(0.3)  # (0.64 - 0.4) / 0.8
    assert band_distance(2.0, 1.0, 0.5, 1.5) == pytest.approx(0.5)  # (2.0 - 1.5) / 1.0
    assert band_distance(-3.0, -2.0, -2.4, -1.6) == pytest.approx(0.3)  # |ref| for a negative baseline
    assert band_distance(0.7, 0.8, 0.64, 0.96) == 0.0  # inside
    assert band_distance(0.05, 0.0, -0.02, 0.02) == pytest.approx(0.03 / DISTANCE_TINY)  # zero baseline
    huge = band_distance(1e308, -1e-300, -1e308, -1e308)
    assert huge == DISTANCE_MAX and json.loads(json.dumps(huge)) == huge  # capped: it reaches XCom within 64 bits


def test_summary_entries_hold_the_hand_computed_numbers_worst_first():
    verdict = _verdict(_regressed_results())
    grad, reward, kl = verdict["summary"]  # grad 0.5 outside its band, reward 0.3, then the error

    assert reward["metric_key"] == "rollout/raw_reward" and reward["steps_key"] == ALL
    assert reward["constraint_key"] == '{"rel_down": 0.2, "rel_up": 0.2}'
    assert reward["counts"] == {"PASS": 40, "FAIL": 80, "INACTIVE": 0, "ERROR": 0}
    assert (reward["first_failing_step"], reward["last_failing_step"], reward["side"]) == (40, 119, "below")
    worst = reward["worst"]
    assert (worst["step"], worst["at_step"], worst["current"], worst["side"], worst["bound"]) == (
        100, 100, 0.4, "below", "rel")
    assert (worst["ref"], worst["lo"], worst["hi"]) == pytest.approx((0.8, 0.64, 0.96))
    assert worst["distance"] == pytest.approx((0.64 - 0.4) / 0.8)
    assert reward["error"] is None

    assert grad["metric_key"] == "train/grad_norm"
    assert grad["counts"] == {"PASS": 0, "FAIL": 1, "INACTIVE": 0, "ERROR": 0}
    assert (grad["first_failing_step"], grad["last_failing_step"], grad["side"]) == (119, 119, "above")  # at_step
    assert (grad["worst"]["step"], grad["worst"]["at_step"]) == (-1, 119)
    assert grad["worst"]["distance"] == pytest.approx((2.0 - 1.5) / 1.0)

    assert kl["metric_key"] == "train/ppo_kl"
    assert kl["counts"] == {"PASS": 0, "FAIL": 0, "INACTIVE": 0, "ERROR": 1}
    assert kl["worst"] is None and kl["side"] is None
    assert (kl["first_failing_step"], kl["last_failing_step"]) == (None, None)
    assert kl["error"] == "metric 'train/ppo_kl' is absent"


def test_a_declaration_failing_on_both_sides_says_both():
    results = [_result("m", 0, 1.5, 1.0), _result("m", 1, 1.0, 1.0), _result("m", 2, 0.4, 1.0)]
    (entry,) = _verdict(results)["summary"]
    assert entry["side"] == "both"
    assert (entry["first_failing_step"], entry["last_failing_step"]) == (0, 2)
    assert entry["counts"] == {"PASS": 1, "FAIL": 2, "INACTIVE": 0, "ERROR": 0}
    assert entry["worst"]["step"] == 2  # 0.4 below lo 0.8, farther than 0.3 above hi 1.2
    assert entry["worst"]["distance"] == pytest.approx(0.4)


def test_trusted_run_has_an_empty_summary():
    verdict = _verdict([_result("m", s, 1.0, 1.0) for s in range(3)])
    assert verdict["summary"] == []
    assert str(render_report(verdict)).startswith("metric-gate: rl-7b run af-1: TRUSTED (3 results")


def test_results_are_listed_worst_first_then_errors():
    verdict = _verdict(_regressed_results())
    listed = [(r["metric_key"], r["step"]) for r in verdict["results"]]
    assert listed[:6] == [("train/grad_norm", -1), ("rollout/raw_reward", 100), ("rollout/raw_reward", 101),
                          ("rollout/raw_reward", 102), ("rollout/raw_reward", 99), ("rollout/raw_reward", 103)]
    assert listed[6:-1] == [("rollout/raw_reward", s) for s in range(40, 120) if s not in WORST]  # ties: step order
    assert listed[-1] == ("train/ppo_kl", None)


def test_all_results_keep_declaration_then_step_order():
    results = _regressed_results()
    verdict = _verdict(results, all_results=True)
    assert [(r["metric_key"], r["step"]) for r in verdict["results"]] == [(r.metric_key, r.step) for r in results]
    assert [e["metric_key"] for e in verdict["summary"]] == ["train/grad_norm", "rollout/raw_reward", "train/ppo_kl"]


def test_summary_counts_stay_exact_when_results_are_truncated():
    full = _verdict(_regressed_results())
    cut = _verdict(_regressed_results(), max_results=3)
    assert len(cut["results"]) == 3 and cut["truncated"] == 82 - 3
    assert cut["summary"] == full["summary"]
    assert [r["step"] for r in cut["results"]] == [-1, 100, 101]  # truncation drops the mildest


def test_summary_counts_come_from_declaration_counts_when_only_failures_are_passed():
    """What the pipeline does: it builds only the FAIL and ERROR results and counts the rest."""
    results = [r for r in _regressed_results() if r.status != "PASS"]
    key = ("rollout/raw_reward", ALL, '{"rel_down": 0.2, "rel_up": 0.2}')
    per_declaration = {key: {"PASS": 40, "FAIL": 80, "INACTIVE": 0, "ERROR": 0}}
    verdict = _verdict(results, counts={"PASS": 40, "FAIL": 81, "INACTIVE": 0, "ERROR": 1},
                       declaration_counts=per_declaration)
    reward = next(e for e in verdict["summary"] if e["metric_key"] == "rollout/raw_reward")
    assert reward["counts"] == {"PASS": 40, "FAIL": 80, "INACTIVE": 0, "ERROR": 0}


def test_verdict_with_summary_is_json_serialisable_and_valid():
    verdict = _verdict(_regressed_results())
    loaded = json.loads(json.dumps(verdict, allow_nan=False))
    assert loaded == verdict
    VerdictSchema().load(loaded)
    older = {k: v for k, v in loaded.items() if k != "summary"}  # a v1 verdict from before the summary
    assert VerdictSchema().load(older)["summary"] == []


def test_report_starts_with_one_summary_line_per_failing_declaration():
    verdict = _verdict(_regressed_results())
    lines = str(render_report(verdict, where=("Every result: metric-gate show af-1 --all",))).splitlines()
    assert lines[:4] == [
        'REGRESSED train/grad_norm (steps "last"): 1 of 1 step FAIL, step 119, above band, '
        "worst step 119: 2 vs baseline 1 (change +100%; band 0.5..1.5)",
        'REGRESSED rollout/raw_reward (steps "all"): 80 of 120 steps FAIL, steps 40..119, below band, '
        "worst step 100: 0.4 vs baseline 0.8 (change -50%; band 0.64..0.96)",
        "ERROR train/ppo_kl (steps \"all\"): metric 'train/ppo_kl' is absent",
        "metric-gate: rl-7b run af-1: NOT-TRUSTED (122 results, 81 fail, 1 error)",
    ]
    assert lines[4].startswith("metric-gate verdict for series rl-7b")
    assert lines[-1] == "Every result: metric-gate show af-1 --all"


def test_table_is_capped_per_declaration_worst_first():
    verdict = _verdict(_regressed_results())
    table = render_report(verdict, table_rows=5).table.splitlines()
    reward_rows = [line for line in table if line.startswith("FAIL    rollout/raw_reward")]
    assert [row.split()[2] for row in reward_rows] == ["100", "101", "102", "99", "103"]
    assert "... 75 more result(s) of rollout/raw_reward not shown" in table
    assert table.index("... 75 more result(s) of rollout/raw_reward not shown") == table.index(reward_rows[-1]) + 1
    assert sum(1 for line in table if line.startswith(("FAIL", "ERROR"))) == 1 + 5 + 1

    two = render_report(verdict, table_rows=2).table
    assert "... 78 more result(s) of rollout/raw_reward not shown" in two
    everything = render_report(verdict, table_rows=None).table
    assert sum(1 for line in everything.splitlines() if line.startswith("FAIL    rollout/raw_reward")) == 80
    assert "more result(s)" not in everything


def test_table_counts_what_truncation_left_out_of_the_verdict():
    verdict = _verdict(_regressed_results(), max_results=3)
    table = render_report(verdict).table
    assert "... 78 more result(s) of rollout/raw_reward not shown" in table  # 80 FAIL, 2 listed
    assert "... 1 more result(s) of train/ppo_kl not shown" in table  # listed in summary, cut from results
    assert "79 result(s) left out of the verdict itself" in table


@pytest.mark.slow
def test_summary_stays_exact_at_100000_coordinates_under_the_xcom_limit():
    results = [_result("rollout/raw_reward", s, 0.8 if s % 4 else 0.5 - s * 1e-7, 0.8) for s in range(100_000)]
    verdict = _verdict(results, max_bytes=XCOM_MAX_BYTES)
    assert len(json.dumps(verdict).encode()) <= XCOM_MAX_BYTES
    (entry,) = verdict["summary"]
    assert entry["counts"] == {"PASS": 75_000, "FAIL": 25_000, "INACTIVE": 0, "ERROR": 0}
    assert (entry["first_failing_step"], entry["last_failing_step"]) == (0, 99_996)
    assert entry["worst"]["step"] == 99_996  # the lowest value
    assert verdict["results"][0]["step"] == 99_996
    assert len(verdict["results"]) + verdict["truncated"] == 25_000


@pytest.mark.parametrize(
    ("listed", "currents", "shown"),
    [
        ([500, 1000], {500: 0.4, 1000: 0.4}, "2 of 2 steps FAIL, steps [500, 1000], below band"),
        ([1000, 500, 750], {500: 0.4, 750: 0.4, 1000: 0.8}, "2 of 3 steps FAIL, steps [500, 750], below band"),
        ([500, 750, 1000], {500: 0.4, 750: 0.8, 1000: 0.4},
         "2 of 3 steps FAIL, 2 of the listed steps from 500 to 1000, below band"),
        ([500, 1000], {500: 0.8, 1000: 0.4}, "1 of 2 steps FAIL, step 1000, below band"),
    ],
)
def test_the_failing_steps_of_a_steps_list_read_as_a_list(listed, currents, shown):
    """``steps 500..1000`` would read as a range of 501 steps; the list ``[500, 1000]`` had two."""
    key = json.dumps(listed, separators=(",", ":"))
    results = [_result("eval/f1", s, currents[s], 0.8, steps_key=key) for s in listed]
    (line,) = [x for x in str(render_report(_verdict(results))).splitlines() if x.startswith("REGRESSED")]
    assert line.startswith(f"REGRESSED eval/f1 (steps {key}): {shown}, worst step")


def test_the_verdict_options_default_to_listing_the_worst_200_results_unbounded():
    options = VerdictOptions()
    assert (options.all_results, options.max_results, options.max_bytes, options.listed) == (False, 200, None, None)
    assert (options.counts, options.declaration_counts, options.sections) == (None, None, None)
    assert tuple(options.extra_fields) == () and tuple(options.warn_declarations) == ()
    assert _verdict(_regressed_results()) == _verdict(_regressed_results(), max_results=200)


def test_an_unknown_verdict_option_is_refused():
    with pytest.raises(TypeError, match="unexpected keyword argument 'max_result'"):
        VerdictOptions(max_result=3)  # type: ignore[call-arg]


def test_the_header_leads_the_verdict_in_its_documented_order():
    verdict = _verdict(_regressed_results())
    assert list(verdict)[:10] == ["schema", "series", "backend", "suite", "run_id", "role", "logical_date",
                                  "trusted", "enforced", "blocking"]
    assert (verdict["series"], verdict["run_id"], verdict["trusted"], verdict["enforced"]) == \
        ("rl-7b", "af-1", False, True)
