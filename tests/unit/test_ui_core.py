"""The UI's pure core: summary from a verdict, chart points, SVG charts, pages and input schemas."""

from __future__ import annotations

import re
from datetime import datetime, timedelta, timezone

import pytest
from marshmallow import ValidationError

from airflow_metric_gate.plugins.charts import coordinate_chart, steps_chart
from airflow_metric_gate.plugins.data import (
    band_distance,
    history_points,
    status_counts,
    step_band,
    summary_from_results,
    summary_text,
    verdict_summary,
)
from airflow_metric_gate.plugins.pages import DeclarationView, index_page, task_page
from airflow_metric_gate.schemas.ui import MarkFormSchema, SeriesQuerySchema, TaskQuerySchema

T0 = datetime(2026, 11, 1, tzinfo=timezone.utc)
REWARD = ("rollout/raw_reward", '"all"', '{"rel_down":0.1}')


def _fail(step, current, ref=1.0, lo=0.9, hi=1.1, key=REWARD):
    side = "below" if current < lo else "above"
    return {"metric_key": key[0], "steps_key": key[1], "constraint_key": key[2], "step": step, "at_step": step,
            "status": "FAIL", "current": current, "ref": ref, "n": 5, "lo": lo, "hi": hi, "side": side,
            "bound": "rel", "reason": ""}


def _error(key):
    return {"metric_key": key[0], "steps_key": key[1], "constraint_key": key[2], "step": None, "at_step": None,
            "status": "ERROR", "current": None, "ref": None, "n": 0, "lo": None, "hi": None, "side": None,
            "bound": None, "reason": "metric missing from the record"}


def test_summary_from_results_is_per_declaration_worst_first():
    kl = ("train/ppo_kl", '"last"', "{}")
    results = [_fail(120, 0.6), _fail(150, 0.5), _fail(199, 0.8), _fail(-1, 1.6, key=kl), _error(("x", '"all"', "{}"))]
    results[3]["at_step"] = 199
    summary = summary_from_results(results)
    assert [e["metric_key"] for e in summary] == ["train/ppo_kl", "rollout/raw_reward", "x"]
    reward = summary[1]
    assert reward["counts"] == {"PASS": None, "FAIL": 3, "INACTIVE": None, "ERROR": 0}
    assert (reward["first_failing_step"], reward["last_failing_step"], reward["side"]) == (120, 199, "below")
    assert reward["worst"]["step"] == 150 and reward["worst"]["distance"] == pytest.approx(0.4)
    assert summary[0]["first_failing_step"] == 199  # "last": the real step
    assert summary[2]["worst"] is None and summary[2]["error"] == "metric missing from the record"
    text = summary_text(reward)
    assert text.startswith("rollout/raw_reward (steps all): 3 FAIL from step 120 to 199, below the band")
    # the same "by how much" as the task log: the change against the baseline, named
    assert "worst at step 150: 0.5 vs baseline 1 (change -50%; band 0.9..1.1)" in text


def test_the_verdicts_own_summary_wins():
    own = [{"metric_key": "m", "steps_key": '"all"', "constraint_key": "{}", "counts": {}}]
    assert verdict_summary({"summary": own, "results": []}) == (own, True)
    assert verdict_summary({"results": [_fail(1, 0.5)]})[1] is False


def test_band_distance_is_relative_to_the_reference():
    assert band_distance(0.5, 1.0, 0.9, 1.1) == pytest.approx(0.4)
    assert band_distance(1.3, -1.0, -1.1, 1.1) == pytest.approx(0.2)
    assert band_distance(1.0, 1.0, 0.9, 1.1) == 0.0
    assert band_distance(1.0, 0.0, -0.1, 0.1) > 1e6  # a zero baseline still gives a number


def test_status_counts_read_from_the_evaluations_reason():
    assert status_counts("9 PASS, 4 FAIL") == {"PASS": 9, "FAIL": 4, "INACTIVE": 0, "ERROR": 0}
    assert status_counts("9 PASS, 4 FAIL; marked trusted by bob: 3 FAIL were noise") == {
        "PASS": 9, "FAIL": 4, "INACTIVE": 0, "ERROR": 0}
    assert status_counts("marked untrusted by alice: 3 FAIL were noise") is None
    assert status_counts(None) is None


def _rows(n, *, tonight="r9"):
    rows = []
    for i in range(n):
        role, status = ("shadow", "untrusted") if i == 1 else ("baseline", "untrusted" if i == 2 else "trusted")
        rows.append({"run_id": f"r{i}", "logical_date": T0 + timedelta(days=i), "role": role, "status": status,
                     "value": 1.0 + i / 100})
    rows[-1]["run_id"] = tonight
    return rows


def test_coordinate_chart_draws_a_point_per_night_kinds_apart_and_the_band():
    points = history_points(_rows(6), "r9")
    assert [p.kind for p in points] == ["trusted", "shadow", "untrusted", "trusted", "trusted", "tonight"]
    svg = coordinate_chart(points, (1.0, 0.9, 1.1), label="m <step> 3")
    assert 'data-points="6"' in svg
    assert len(re.findall(r'class="mg-point ', svg)) == 6
    assert len(re.findall(r'class="mg-point mg-tonight"', svg)) == 1
    assert re.search(r'<rect class="mg-band" data-lo="0.9" data-hi="1.1"', svg)
    assert 'aria-label="m &lt;step&gt; 3"' in svg  # escaped
    assert "<script" not in svg
    assert "mg-band" not in coordinate_chart(points, None, label="m")  # no baseline, no band
    assert "No stored value" in coordinate_chart([], None, label="m")


def test_steps_chart_marks_failing_steps_against_the_band():
    values = [(s, 1.0 if s < 120 else 0.5) for s in range(200)]
    bands = {s: (1.0, 0.9, 1.1) for s in range(200)}
    failing = set(range(120, 200))
    svg = steps_chart(values, bands, failing, label="reward")
    assert 'data-points="200"' in svg and 'data-failing="80"' in svg
    assert len(re.findall(r'class="mg-point mg-step-fail"', svg)) == 80
    assert len(re.findall(r'<polygon class="mg-band"', svg)) == 1
    many = steps_chart([(s, 1.0) for s in range(5000)], {}, {7}, label="big")
    assert len(re.findall(r'class="mg-point ', many)) == 1  # long series: a line, dots only where it fails


def test_task_page_puts_the_summary_first_and_escapes_everything():
    verdict = {"series": "<s>", "backend": "cuda", "suite": "n", "role": "baseline", "logical_date": "2026-11-06",
               "run_id": "af-1", "trusted": False, "blocking": 0,
               "counts": {"PASS": 9, "FAIL": 3, "INACTIVE": 0, "ERROR": 0},
               "results": [_fail(120, 0.6), _fail(150, 0.5), _fail(199, 0.8)], "truncated": 0}
    summary, own = verdict_summary(verdict)
    html = task_page(verdict, [DeclarationView(entry=e) for e in summary], summary_from_verdict=own,
                     series_href="series?series=%3Cs%3E")
    assert html.index("<h2>What regressed</h2>") < html.index('<ul class="mg-summary">') < html.index("<h2>rollout")
    assert "&lt;s&gt;" in html and "<s>" not in html
    assert "3 FAIL from step 120 to 199" in html
    assert 'href="series?series=%3Cs%3E"' in html
    assert not re.search(r'(href|action|src)="/', html)  # relative links only


def test_index_page_lists_series_with_relative_links():
    html = index_page([{"series": "a b", "backend": "cuda", "suite": "s", "dag_id": None, "runs": 3,
                        "latest": T0}], hidden=2)
    assert 'href="series?series=a+b&amp;backend=cuda&amp;suite=s"' in html
    assert "2 more series" in html and "(outside Airflow)" in html


def test_task_query_takes_the_uis_unfilled_map_index_as_unmapped():
    base = {"dag_id": "d", "run_id": "r", "task_id": "t"}
    assert TaskQuerySchema().load({**base, "map_index": "{MAP_INDEX}"})["map_index"] == -1
    assert TaskQuerySchema().load({**base, "map_index": "3", "extra": "ignored"})["map_index"] == 3
    for bad in ({**base, "map_index": "-2"}, {**base, "map_index": "x"}, {"dag_id": "d"}, {**base, "dag_id": ""},
                {**base, "nights": "1000"}):
        with pytest.raises(ValidationError):
            TaskQuerySchema().load(bad)


def test_series_query_splits_the_chosen_declaration():
    q = SeriesQuerySchema().load({"series": "s", "backend": "b", "suite": "u",
                                  "declaration": '["m", "\\"all\\"", "{}"]', "step": "3"})
    assert (q["metric_key"], q["steps_key"], q["constraint_key"], q["step"], q["page"]) == ("m", '"all"', "{}", 3, 1)
    for bad in ('["m"]', "not json", '[1, 2, 3]'):
        with pytest.raises(ValidationError):
            SeriesQuerySchema().load({"series": "s", "backend": "b", "suite": "u", "declaration": bad})


def test_mark_form_needs_a_reason_and_comes_back_only_to_this_view():
    form = {"run_id": "af-1", "status": "untrusted", "reason": "eval set changed", "token": "t", "next": "task?x=1"}
    assert MarkFormSchema().load(form)["next"] == "task?x=1"
    for bad in ({"reason": "   "}, {"reason": ""}, {"status": "pending"}, {"next": "https://evil.example/"},
                {"next": "//evil.example/"}, {"next": "/api/v2/dags"}, {"token": ""}):
        with pytest.raises(ValidationError):
            MarkFormSchema().load({**form, **bad})


def test_step_band_is_the_band_the_judging_function_uses_including_the_mad_band():
    from airflow_metric_gate.evaluation import constraint_params, describe, judge

    baseline = [0.8, 0.9, 0.9, 0.9, 1.0, 1.0, 1.0, 1.0, 1.1, 1.1, 1.1, 1.2]  # mean and median 1.0, MAD 0.1
    constraint = {"rel_up": 0.05, "rel_down": 0.05, "abs_floor_up": 0.0, "abs_floor_down": 0.0}
    robust = {"metric_key": "m", "steps_key": '"all"', "constraint_key": "c", "constraint": constraint,
              "band": "mad", "mad_k": 6.0}
    judged = judge(1.3, baseline, constraint_params(constraint), 1, "mean", 6.0)
    expected = describe("m", '"all"', "c", 0, 0, 1.3, len(baseline), judged, constraint, 1, "mean", 6.0)
    assert judged[0] == "PASS" and (expected.lo, expected.hi) == pytest.approx((0.4, 1.6))
    bands = step_band({0: 1.3, 1: 1.0}, {0: baseline, 1: [1.0]}, robust)
    assert bands[0] == pytest.approx((1.0, 0.4, 1.6))  # the mad band, not the constraint's [0.95, 1.05]
    assert bands[1] == pytest.approx((1.0, 0.95, 1.05))  # too few values for the mad band: the constraint's
    plain = {**robust, "band": None, "mad_k": None}
    assert step_band({0: 1.3}, {0: baseline}, plain)[0] == pytest.approx((1.0, 0.95, 1.05))
    assert step_band({0: 1.3}, {0: baseline}, plain, aggregate="median")[0] == pytest.approx((1.0, 0.95, 1.05))
    assert step_band({0: 1.3}, {0: baseline[:2]}, robust, min_history=3) == {}  # cold start: no band


def test_task_page_shows_each_declarations_own_trust_and_why_it_is_starved():
    f1 = ("eval/f1", '"last"', '{"rel_down":0.1}')
    typo = ("eval/f1_scroe", '"last"', '{"rel_down":0.1}')
    verdict = {"series": "s", "backend": "cuda", "suite": "n", "role": "baseline", "logical_date": "2026-11-06",
               "run_id": "af-1", "trusted": False, "blocking": 1, "policy": "calibrated",
               "counts": {"PASS": 1, "FAIL": 0, "INACTIVE": 0, "ERROR": 1}, "results": [_error(typo)],
               "declarations": [
                   {**dict(zip(("metric_key", "steps_key", "constraint_key"), REWARD)), "outcome": "pass",
                    "trusted": True, "nights": 12, "z": 0.42, "threshold": 3.1, "level": -0.012},
                   {**dict(zip(("metric_key", "steps_key", "constraint_key"), typo)), "outcome": "error",
                    "trusted": False},
               ],
               "starved": [{**dict(zip(("metric_key", "steps_key", "constraint_key"), f1)),
                            "reason": "no trusted night since 2026-11-01: every night was untrusted because "
                                      "eval/f1_scroe is absent from the record"}]}
    summary, own = verdict_summary(verdict)
    html = task_page(verdict, [DeclarationView(entry=e) for e in summary], summary_from_verdict=own,
                     series_href=None)
    table = html[html.index('<table class="mg-declarations">'):]
    table = table[:table.index("</table>")]
    rows = re.findall(r"<tr.*?</tr>", table)[1:]
    assert len(rows) == 3  # both calibrated declarations, then the starved reference one
    cells = [re.findall(r"<td[^>]*>(.*?)</td>", r) for r in rows]
    assert cells[0][1:6] == ["pass", "yes", "12", "z 0.42 vs -+3.1", "-1.2 %"]
    assert cells[1][1:3] == ["error", "no"] and cells[1][6] == "-"
    assert "eval/f1 " in cells[2][0] and cells[2][2] == "run&#x27;s trust"
    assert "eval/f1_scroe is absent from the record" in cells[2][6] and 'class="mg-starved"' in rows[2]
    # right after an accept: the new level's nights, and the nights before it that fill its history up
    verdict["declarations"][0]["bridge"] = {"nights_since": 2, "nights_before": 18, "since": "2026-11-04T00:00:00"}
    verdict["declarations"][0]["nights"] = 2
    bridged = task_page(verdict, [DeclarationView(entry=e) for e in summary], summary_from_verdict=own,
                        series_href=None)
    assert "<td>2 (+18 from before 2026-11-04)</td>" in bridged
    # a reference verdict that names nothing per declaration has no such table
    plain = {k: v for k, v in verdict.items() if k not in ("declarations", "starved", "policy")}
    assert "mg-declarations" not in task_page(plain, [], summary_from_verdict=True, series_href=None)


def test_night_points_keep_each_nights_measure_and_skip_nights_without_one():
    from types import SimpleNamespace

    from airflow_metric_gate.plugins.charts import night_chart
    from airflow_metric_gate.plugins.data import MEASURE_DISTANCE, MEASURE_Z, night_points, outcome_key

    def run(day, outcome):
        return SimpleNamespace(run_id=f"r{day}", logical_date=T0 + timedelta(days=day),
                               outcomes={} if outcome is None else {outcome_key(*REWARD): outcome})

    runs = [run(4, {"o": "fail", "z": -9.0, "q": 4.0}), run(3, {"o": "pass", "z": 0.5}),  # 3: stored before q
            run(2, {"o": "inactive"}), run(1, None), run(0, {"o": "pass", "z": 1.0, "q": 5.0})]
    measure, points = night_points(runs, REWARD)
    assert measure == MEASURE_Z
    assert [(p.run_id, p.value, p.lo, p.hi) for p in points] == [
        ("r0", 1.0, -5.0, 5.0), ("r3", 0.5, None, None), ("r4", -9.0, -4.0, 4.0)]  # oldest first
    svg = night_chart(points, measure, label="reward")
    assert 'data-nights="2"' in svg and len(re.findall(r'class="mg-point mg-night ', svg)) == 3
    reference = [run(0, {"o": "pass", "d": 0.0}), run(1, {"o": "fail", "d": 0.25}), run(2, {"o": "error"})]
    measure, points = night_points(reference, REWARD)
    assert measure == MEASURE_DISTANCE and [p.value for p in points] == [0.0, 0.25]
    svg = night_chart(points, measure, label="reward")
    assert 'data-measure="distance"' in svg and "mg-band" not in svg  # its band is the edge at 0
    assert "No night of reward" in night_chart([], MEASURE_Z, label="reward")
