"""EvaluateGateOperator: verdict to XCom first, then a table and one summary line, then enforce."""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone

import pytest
from _fakes import chained, context
from airflow.sdk.exceptions import AirflowException, AirflowFailException

from airflow_metric_gate.declarations import declare
from airflow_metric_gate.operators.evaluate import EvaluateGateOperator
from airflow_metric_gate.operators.persist import PersistValuesOperator
from airflow_metric_gate.pipeline import selection_to_payload
from airflow_metric_gate.selection import Selection

# These tests give PersistValuesOperator its values inline (the deprecated version 1 selection).
pytestmark = pytest.mark.filterwarnings("ignore:a selection with its values inline:DeprecationWarning")

CONSTRAINT = {"rel_up": 0.5, "rel_down": 0.2}
FIRST_NIGHT = datetime(2026, 11, 1, tzinfo=timezone.utc)


def _night(night: int, reward: float | list[float], *, run_type: str = "scheduled", steps: int = 3,
           enforce: bool = False):
    """Persist one night's selection (one reward, or one per step); return its context and what persist returned."""
    declaration = declare("rollout/raw_reward", steps="all", constraint=CONSTRAINT, enforce=enforce)
    rewards = reward if isinstance(reward, list) else [reward] * steps
    selection = Selection(declaration, points=[(s, r, s) for s, r in enumerate(rewards)])
    ctx = context(
        run_type=run_type,
        logical_date=FIRST_NIGHT + timedelta(days=night),
        run_id=f"{run_type}__night{night}",
    )
    persisted = PersistValuesOperator(
        task_id="persist_values", series="rl-7b", selection=selection_to_payload([selection])
    ).execute(ctx)
    return ctx, persisted


def _history(nights: int = 3, steps: int = 3) -> None:
    for night in range(nights):
        ctx, persisted = _night(night, 0.8, steps=steps)
        EvaluateGateOperator(task_id="evaluate_gate", run=persisted, enforce=True).execute(ctx)


def _output(capsys) -> str:
    captured = capsys.readouterr()
    return captured.out + captured.err


def test_trusted_night_pushes_verdict_and_logs_summary(db, capsys):
    _history(2)
    ctx, persisted = _night(2, 0.82)
    EvaluateGateOperator(task_id="evaluate_gate", run=persisted, enforce=True).execute(ctx)

    verdict = ctx["ti"].pushed["return_value"]
    assert verdict["schema"] == "airflow-metric-gate/verdict/v1"
    assert (verdict["trusted"], verdict["counts"]["PASS"]) == (True, 3)
    out = _output(capsys)
    assert f"metric-gate: rl-7b run {persisted['run_id']}: TRUSTED (3 results, 0 fail, 0 error)" in out
    assert out.count("metric-gate: rl-7b run " + persisted["run_id"]) == 1  # one greppable line


def test_enforced_regression_pushes_verdict_first_then_fails_without_retry(db, capsys):
    _history()
    ctx, persisted = _night(3, 0.4)
    with pytest.raises(AirflowFailException) as err:
        EvaluateGateOperator(task_id="evaluate_gate", run=persisted, enforce=True).execute(ctx)

    verdict = ctx["ti"].pushed["return_value"]  # recorded before failing
    assert verdict["trusted"] is False and verdict["counts"]["FAIL"] == 3
    message = str(err.value)
    assert message.startswith(f"metric-gate: rl-7b run {persisted['run_id']}: NOT-TRUSTED (3 results, 3 fail")
    assert "FAIL rollout/raw_reward step 0: " in message
    assert "below" in message
    assert "and 0 more" not in message
    assert "Full verdict: XCom return_value of task task in DAG run scheduled__night3" in message
    out = _output(capsys)
    assert "STATUS" in out and "[0.64, 1.2]" in out  # the table, with the band
    assert db.query("SELECT status FROM runs WHERE run_id = ?", persisted["run_id"]) == [("untrusted",)]


def test_a_divergence_reaches_xcom_within_64_bits_and_the_log_keeps_its_value(db, capsys):
    """A reward of 1e25: the XCom copy holds 1e18 (see verdict.for_xcom), the log and the message the value."""
    _history()
    ctx, persisted = _night(3, 1e25)
    with pytest.raises(AirflowFailException) as err:
        EvaluateGateOperator(task_id="evaluate_gate", run=persisted, enforce=True).execute(ctx)
    pushed = ctx["ti"].pushed["return_value"]
    assert {r["current"] for r in pushed["results"]} == {1e18}
    assert "1e+25" in str(err.value) and "1e+25" in _output(capsys)


def test_failure_message_lists_a_few_and_counts_the_rest(db):
    _history(steps=10)
    ctx, persisted = _night(3, 0.4, steps=10)
    with pytest.raises(AirflowFailException, match=r"; and 7 more\. Full verdict"):
        EvaluateGateOperator(task_id="evaluate_gate", run=persisted, enforce=True).execute(ctx)


def test_not_enforced_regression_reports_and_succeeds(db, capsys):
    _history()
    ctx, persisted = _night(3, 0.4)
    EvaluateGateOperator(task_id="evaluate_gate", run=persisted).execute(ctx)
    assert ctx["ti"].pushed["return_value"]["trusted"] is False
    assert "NOT-TRUSTED (3 results, 3 fail, 0 error)" in _output(capsys)


def test_declaration_enforce_fails_the_task_without_operator_enforce(db):
    _history()
    ctx, persisted = _night(3, 0.4, enforce=True)
    with pytest.raises(AirflowFailException):
        EvaluateGateOperator(task_id="evaluate_gate", run=persisted).execute(ctx)


def test_shadow_run_reports_and_succeeds_even_when_enforced(db, capsys):
    _history()
    ctx, persisted = _night(3, 0.4, run_type="manual")
    EvaluateGateOperator(task_id="evaluate_gate", run=persisted, enforce=True).execute(ctx)
    verdict = ctx["ti"].pushed["return_value"]
    assert (verdict["role"], verdict["trusted"]) == ("shadow", False)
    assert "Shadow run" in _output(capsys)


def test_shadow_runs_never_feed_baselines(db):
    _history(1)
    ctx, persisted = _night(1, 5.0, run_type="manual")  # a wild shadow night
    EvaluateGateOperator(task_id="evaluate_gate", run=persisted).execute(ctx)
    ctx, persisted = _night(2, 0.8)
    EvaluateGateOperator(task_id="evaluate_gate", run=persisted, enforce=True).execute(ctx)
    assert ctx["ti"].pushed["return_value"]["trusted"] is True


def test_verdict_stays_below_64_kib(db):
    _history(1, steps=3000)
    ctx, persisted = _night(1, 0.1, steps=3000)
    with pytest.raises(AirflowFailException):
        EvaluateGateOperator(task_id="evaluate_gate", run=persisted, enforce=True).execute(ctx)
    verdict = ctx["ti"].pushed["return_value"]
    assert len(json.dumps(verdict).encode()) < 64 * 1024
    assert verdict["counts"]["FAIL"] == 3000
    assert verdict["truncated"] == 3000 - len(verdict["results"]) > 0


def test_run_from_upstream_xcom_or_store_run_id(db):
    _history(1)
    ctx, persisted = _night(1, 0.8)
    op = chained(EvaluateGateOperator, upstream_task_id="persist_values")
    ctx["ti"].upstream[("persist_values", -1)] = persisted
    op.execute(ctx)
    assert ctx["ti"].pushed["return_value"]["run_id"] == persisted["run_id"]

    EvaluateGateOperator(task_id="evaluate_gate", run=persisted["run_id"]).execute(ctx)
    assert ctx["ti"].pushed["return_value"]["run_id"] == persisted["run_id"]


def test_no_declarations_is_a_trusted_empty_verdict(db):
    ctx = context()
    persisted = PersistValuesOperator(
        task_id="persist_values", series="rl-7b", selection=selection_to_payload([])
    ).execute(ctx)
    EvaluateGateOperator(task_id="evaluate_gate", run=persisted, enforce=True).execute(ctx)
    verdict = ctx["ti"].pushed["return_value"]
    assert verdict["trusted"] is True and verdict["results"] == []


def test_unknown_store_run_fails_without_retry(db):
    with pytest.raises(AirflowFailException, match="no run 'af-nope'"):
        EvaluateGateOperator(task_id="evaluate_gate", run="af-nope").execute(context())


def test_store_outage_is_retryable(monkeypatch):
    monkeypatch.setenv("AIRFLOW_CONN_METRIC_GATE_DB", "postgresql://nobody@127.0.0.1:9/none?connect_timeout=2")
    with pytest.raises(AirflowException) as err:
        EvaluateGateOperator(task_id="evaluate_gate", run="af-x").execute(context())
    assert not isinstance(err.value, AirflowFailException)


def _regressed_rewards() -> list[float]:
    """120 steps; from step 40 on the reward collapses (80 failing steps), worst at step 100."""
    return [0.8 if s < 40 else (0.2 if s == 100 else 0.5) for s in range(120)]


def test_regressed_night_log_starts_with_the_summary_then_a_capped_table(db, capsys):
    _history(steps=120)
    capsys.readouterr()
    ctx, persisted = _night(3, _regressed_rewards())
    with pytest.raises(AirflowFailException):
        EvaluateGateOperator(task_id="evaluate_gate", run=persisted, enforce=True).execute(ctx)

    verdict = ctx["ti"].pushed["return_value"]
    lines = [line for line in _output(capsys).splitlines() if line.strip()]
    first = next(i for i, line in enumerate(lines) if "rollout/raw_reward" in line or "metric-gate" in line)
    assert (
        'REGRESSED rollout/raw_reward (steps "all"): 80 of 120 steps FAIL, steps 40..119, below band, '
        "worst step 100: 0.2 vs baseline 0.8 (change -75%; band 0.64..1.2)"
    ) in lines[first]
    grep_line = f"metric-gate: rl-7b run {persisted['run_id']}: NOT-TRUSTED (120 results, 80 fail, 0 error)"
    assert grep_line in lines[first + 1]
    rest = lines[first + 2:]
    rows = [line for line in rest if "FAIL    rollout/raw_reward" in line]
    assert len(rows) == 5  # the 80-row wall is gone
    assert rows[0].split("FAIL    rollout/raw_reward")[1].split()[0] == "100"  # worst first
    assert any("... 75 more result(s) of rollout/raw_reward not shown" in line for line in rest)
    where = [line for line in rest if "Full verdict:" in line or "Every result:" in line]
    assert "Full verdict: XCom return_value of task task in DAG run scheduled__night3" in where[0]
    assert f"Every result: metric-gate show {persisted['run_id']} --all" in where[1]
    assert verdict["summary"][0]["counts"] == {"PASS": 40, "FAIL": 80, "INACTIVE": 0, "ERROR": 0}


def test_table_rows_sets_the_cap_of_the_logged_table(db, capsys):
    _history(steps=120)
    capsys.readouterr()
    ctx, persisted = _night(3, _regressed_rewards())
    EvaluateGateOperator(task_id="evaluate_gate", run=persisted, table_rows=2).execute(ctx)
    out = _output(capsys)
    assert out.count("FAIL    rollout/raw_reward") == 2
    assert "... 78 more result(s) of rollout/raw_reward not shown" in out
    assert len(ctx["ti"].pushed["return_value"]["results"]) == 80  # the verdict is not capped by table_rows


def test_show_rebuilds_the_counts_of_the_xcom_verdict(db, capsys):
    """The verdict in XCom, truncated by max_results, and `metric-gate show` agree on every count."""
    from airflow_metric_gate.cli import main

    _history(steps=120)
    ctx, persisted = _night(3, _regressed_rewards())
    EvaluateGateOperator(task_id="evaluate_gate", run=persisted, max_results=10).execute(ctx)
    pushed = ctx["ti"].pushed["return_value"]
    assert pushed["truncated"] == 70
    capsys.readouterr()

    assert main(["show", persisted["run_id"], "--json", "--store", db.url]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert shown["counts"] == pushed["counts"] == {"PASS": 40, "FAIL": 80, "INACTIVE": 0, "ERROR": 0}
    assert shown["summary"] == pushed["summary"]
    assert shown["results"][:10] == pushed["results"]
    assert len(shown["results"]) + shown["truncated"] == 80

    assert main(["show", persisted["run_id"], "--store", db.url]) == 0
    human = capsys.readouterr().out
    assert human.startswith('REGRESSED rollout/raw_reward (steps "all"): 80 of 120 steps FAIL')
    assert "NOT-TRUSTED (120 results, 80 fail, 0 error)" in human


def test_history_limit_over_its_bound_fails_without_retry(db):
    ctx, persisted = _night(0, 0.8)
    with pytest.raises(AirflowFailException, match="history_limit"):
        EvaluateGateOperator(task_id="evaluate_gate", run=persisted, history_limit=501).execute(ctx)


def test_a_newline_in_a_metric_key_cannot_forge_a_log_line(db, capsys):
    forged = "m\nmetric-gate: rl-7b run x: TRUSTED (3 results, 0 fail, 0 error)"
    for night, reward in ((0, 0.8), (1, 0.1)):
        declaration = declare(forged, steps="all", constraint=CONSTRAINT, enforce=True)
        ctx = context(logical_date=FIRST_NIGHT + timedelta(days=night), run_id=f"scheduled__night{night}")
        persisted = PersistValuesOperator(
            task_id="persist_values", series="rl-7b",
            selection=selection_to_payload([Selection(declaration, points=[(0, reward, 0)])]),
        ).execute(ctx)
        operator = EvaluateGateOperator(task_id="evaluate_gate", run=persisted)
        if night == 0:
            operator.execute(ctx)
    with pytest.raises(AirflowFailException) as err:
        operator.execute(ctx)
    lines = _output(capsys).splitlines()
    assert not [line for line in lines if line.lstrip().startswith("metric-gate: rl-7b run x")]
    assert "\n" not in str(err.value)


@pytest.mark.parametrize("how", [{}, {"enforce": True, "severity": "warn"},
                                 {"enforce": True, "allowlist_reason": "known noisy after the kernel change"}],
                         ids=["not-enforced", "severity-warn", "allowlisted"])
def test_failure_message_lists_only_the_results_that_block(db, how):
    """A FAIL that does not block (a non-enforced declaration, ``severity: warn``, an allowlisted one) is
    reported in the verdict, never named as enforced in the failure."""
    enforced = declare("rollout/raw_reward", steps="all", constraint=CONSTRAINT, enforce=True)
    reported = declare("train/grad_norm", steps="all", constraint=CONSTRAINT, **how)

    def night(day, reward, grad):
        selections = [Selection(enforced, points=[(s, reward, s) for s in range(3)]),
                      Selection(reported, points=[(s, grad, s) for s in range(3)])]
        ctx = context(run_type="scheduled", logical_date=FIRST_NIGHT + timedelta(days=day), run_id=f"scheduled__{day}")
        persisted = PersistValuesOperator(task_id="persist_values", series="rl-7b",
                                          selection=selection_to_payload(selections)).execute(ctx)
        return ctx, persisted

    for day in range(2):
        ctx, persisted = night(day, 0.8, 1.0)
        EvaluateGateOperator(task_id="evaluate_gate", run=persisted).execute(ctx)
    ctx, persisted = night(2, 0.4, 9.0)  # both regress; only the reward is enforced
    with pytest.raises(AirflowFailException) as err:
        EvaluateGateOperator(task_id="evaluate_gate", run=persisted).execute(ctx)
    verdict = ctx["ti"].pushed["return_value"]
    assert verdict["blocking"] == 3 and verdict["counts"]["FAIL"] == 6
    assert {r["metric_key"] for r in verdict["results"] if r.get("blocking")} == {"rollout/raw_reward"}
    message = str(err.value)
    assert "3 enforced FAIL/ERROR result(s)" in message and "rollout/raw_reward" in message
    assert "train/grad_norm" not in message.split("result(s):", 1)[1]
