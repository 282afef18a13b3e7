"""What a notice says, built from a verdict (no Airflow), and when a night that passed still deserves one."""

from __future__ import annotations

from airflow_metric_gate.notification import build_notice, needs_attention
from airflow_metric_gate.operators.links import metric_gate_tab_url

VERDICT = {
    "schema": "airflow-metric-gate/verdict/v1", "series": "rl-7b", "backend": "cuda", "suite": "nightly-8xh100",
    "run_id": "run-3", "role": "baseline", "logical_date": "2026-11-03T00:00:00+00:00", "trusted": False,
    "enforced": True, "blocking": 1, "counts": {"PASS": 3, "FAIL": 1, "INACTIVE": 0, "ERROR": 0},
    "summary": [{
        "metric_key": "rollout/raw_reward", "steps_key": '"all"', "constraint_key": "{}",
        "counts": {"PASS": 1, "FAIL": 1, "INACTIVE": 0, "ERROR": 0}, "first_failing_step": 1,
        "last_failing_step": 1, "side": "below",
        "worst": {"step": 1, "at_step": 1, "current": 0.4, "ref": 0.8, "lo": 0.64, "hi": 0.96, "side": "below",
                  "bound": "rel", "distance": 0.3},
        "error": None,
    }],
    "results": [], "truncated": 0,
    "level_shifts": [{"metric_key": "rollout/raw_reward", "steps_key": '"all"', "constraint_key": "{}",
                      "since": "2026-11-02T00:00:00+00:00", "since_run_id": "run-2", "nights": 2,
                      "change": -0.5, "continues": True}],
    "drifts": [{"metric_key": "train/grad_norm", "steps_key": '"all"', "constraint_key": "{}",
                "start": "2026-10-20T00:00:00+00:00", "slope": 0.01, "cumulative": 0.12, "side": "above"}],
}


def _notice(verdict, **kwargs):
    defaults = {"dag_id": "d", "task_id": "metric_gate.evaluate_gate", "run_id": "scheduled__2026-11-03",
                "link": "http://ui/x", "failed": True, "who": ["@rl-oncall"]}
    return build_notice(verdict, **{**defaults, **kwargs})


def test_a_failure_notice_has_the_regressed_lines_counts_shifts_drift_who_and_the_link():
    notice = _notice(VERDICT)
    assert notice.subject == "metric-gate BLOCKED: rl-7b (cuda, nightly-8xh100) night 2026-11-03"
    lines = notice.lines
    assert lines[0].startswith('REGRESSED rollout/raw_reward (steps "all"): 1 of 2 steps FAIL, step 1, below band')
    assert "0.4 vs baseline 0.8 (change -50%; band 0.64..0.96)" in lines[0]
    assert 'LEVEL SHIFT rollout/raw_reward (steps "all") (continues): -50.0 % since 2026-11-02' in lines[1]
    assert lines[2] == ('DRIFT train/grad_norm (steps "all"): +12.0 % since 2026-10-20T00:00:00+00:00 '
                        "(+1.0 % a night, above)")
    assert "metric-gate: rl-7b run run-3: NOT-TRUSTED (4 results, 1 fail, 0 error), 1 blocking" in lines
    assert "Who must act: @rl-oncall" in lines
    accept = next(line for line in lines if "accept" in line)
    assert "metric-gate accept --series rl-7b --suite nightly-8xh100 --since run-2" in accept
    assert lines[-1] == "Metric gate tab: http://ui/x"


def test_a_task_that_failed_before_a_verdict_says_its_error():
    notice = _notice(None, error="metric store unavailable, will retry")
    assert notice.subject.startswith("metric-gate: task failed before a verdict")
    assert "Error: metric store unavailable, will retry" in notice.lines


def test_control_characters_in_names_cannot_forge_lines():
    forged = {**VERDICT, "series": "rl\nmetric-gate: x TRUSTED"}
    notice = _notice(forged)
    assert all("\n" not in line for line in (notice.subject, *notice.lines))


def test_which_passing_nights_deserve_a_notice():
    quiet = {**VERDICT, "trusted": True, "blocking": 0, "summary": [], "level_shifts": [], "drifts": []}
    assert not needs_attention(quiet)
    assert needs_attention({**quiet, "drifts": VERDICT["drifts"]})
    assert needs_attention({**quiet, "level_shifts": VERDICT["level_shifts"]})
    assert needs_attention({**quiet, "summary": [{**VERDICT["summary"][0], "severity": "warn"}]})
    assert needs_attention({**quiet, "trusted": False})  # not enforced, yet untrusted
    assert not needs_attention({**quiet, "trusted": False, "role": "shadow"})
    assert not needs_attention(None)


def test_the_tab_url_follows_the_airflow_ui_routes():
    run = "scheduled__2026-11-03T00:00:00+00:00"
    assert metric_gate_tab_url("d", run, "g.evaluate_gate", -1, base="http://h/") == (
        "http://h/dags/d/runs/scheduled__2026-11-03T00%3A00%3A00%2B00%3A00/tasks/g.evaluate_gate/plugin/metric-gate-task"
    )
    assert metric_gate_tab_url("d", "r", "t", 2, base="http://h").endswith("/tasks/t/mapped/2/plugin/metric-gate-task")


def test_the_evaluate_tasks_extra_link_opens_its_metric_gate_tab(monkeypatch):
    from types import SimpleNamespace

    from airflow_metric_gate.operators.links import MetricGateTabLink

    monkeypatch.setenv("AIRFLOW__API__BASE_URL", "https://airflow.example/")
    key = SimpleNamespace(dag_id="nightly", run_id="scheduled__1", task_id="metric_gate.evaluate_gate", map_index=3)
    assert MetricGateTabLink().get_link(None, ti_key=key) == (
        "https://airflow.example/dags/nightly/runs/scheduled__1/tasks/metric_gate.evaluate_gate/mapped/3/plugin/"
        "metric-gate-task")
