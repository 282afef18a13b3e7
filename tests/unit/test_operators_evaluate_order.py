"""EvaluateGateOperator judges a night only once the earlier nights of its history window are decided.

A backfill runs many nights at once: the operator defers (no worker slot held) while an earlier
night is stored but not judged, re-checks on resume, and fails retryably after ``wait_timeout``.
"""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from types import SimpleNamespace

import pytest
from _fakes import context
from airflow.sdk.exceptions import AirflowException, AirflowFailException, TaskDeferred

from airflow_metric_gate.declarations import declare
from airflow_metric_gate.operators.evaluate import EvaluateGateOperator
from airflow_metric_gate.operators.persist import PersistValuesOperator
from airflow_metric_gate.pipeline import selection_to_payload
from airflow_metric_gate.selection import Selection
from airflow_metric_gate.store import open_store

# These tests give PersistValuesOperator its values inline (the deprecated version 1 selection).
pytestmark = pytest.mark.filterwarnings("ignore:a selection with its values inline:DeprecationWarning")

CONSTRAINT = {"rel_up": 0.5, "rel_down": 0.2}
FIRST_NIGHT = datetime(2026, 11, 1, tzinfo=timezone.utc)


def _persist(night: int, reward: float = 0.8):
    declaration = declare("rollout/raw_reward", steps="all", constraint=CONSTRAINT, enforce=True)
    selection = Selection(declaration, points=[(s, reward, s) for s in range(3)])
    ctx = context(logical_date=FIRST_NIGHT + timedelta(days=night), run_id=f"backfill__night{night}")
    persisted = PersistValuesOperator(
        task_id="persist_values", series="rl-7b", selection=selection_to_payload([selection])
    ).execute(ctx)
    return ctx, persisted


def _status(db, run_id):
    with open_store(db.url) as store:
        return store.get_run(run_id).status


def test_defers_while_an_earlier_night_is_pending_then_judges_with_it_on_resume(db):
    ctx0, night0 = _persist(0)
    EvaluateGateOperator(task_id="evaluate_gate", run=night0).execute(ctx0)
    ctx1, night1 = _persist(1)  # stored, not judged yet: the backfill is still on it
    ctx2, night2 = _persist(2, reward=0.4)  # a regression

    op = EvaluateGateOperator(task_id="evaluate_gate", run=night2, enforce=True, poll_interval=30)
    with pytest.raises(TaskDeferred) as deferred:
        op.execute(ctx2)
    assert "return_value" not in ctx2["ti"].pushed  # nothing judged, nothing pushed
    assert _status(db, night2["run_id"]) == "pending"
    assert deferred.value.method_name == "resume"
    moment = deferred.value.trigger.moment
    assert timedelta(seconds=25) < moment - datetime.now(timezone.utc) <= timedelta(seconds=30)
    since = deferred.value.kwargs["waiting_since"]

    with pytest.raises(TaskDeferred):  # still pending on the next check: wait again, same start
        op.resume(ctx2, event=None, waiting_since=since)

    EvaluateGateOperator(task_id="evaluate_gate", run=night1).execute(ctx1)  # night 1 judged
    with pytest.raises(AirflowFailException, match="NOT-TRUSTED"):
        op.resume(ctx2, event=None, waiting_since=since)
    verdict = ctx2["ti"].pushed["return_value"]
    assert {r["n"] for r in verdict["results"]} == {2}  # judged against both earlier nights
    assert _status(db, night2["run_id"]) == "untrusted"


def test_times_out_retryably_naming_the_pending_nights(db):
    _persist(0)
    ctx1, night1 = _persist(1)
    op = EvaluateGateOperator(task_id="evaluate_gate", run=night1, wait_timeout=timedelta(minutes=10))
    long_ago = (datetime.now(timezone.utc) - timedelta(minutes=11)).isoformat()
    with pytest.raises(AirflowException) as err:
        op.resume(ctx1, event=None, waiting_since=long_ago)
    assert not isinstance(err.value, AirflowFailException)  # retried: the nights may be judged by then
    message = str(err.value)
    assert "2026-11-01T00:00:00+00:00" in message
    night0_id = _store_ids(db)[0]
    assert night0_id in message and "backfill__night0" in message
    assert "mark-untrusted" in message
    assert _status(db, night1["run_id"]) == "pending"


def _store_ids(db):
    with open_store(db.url) as store:
        return [r.run_id for r in reversed(store.list_runs())]


def test_last_wait_is_cut_to_the_timeout(db):
    _persist(0)
    ctx1, night1 = _persist(1)
    op = EvaluateGateOperator(task_id="evaluate_gate", run=night1, wait_timeout="120", poll_interval=600)
    op.render_template_fields(ctx1)
    with pytest.raises(TaskDeferred) as deferred:
        op.execute(ctx1)
    assert deferred.value.trigger.moment - datetime.now(timezone.utc) <= timedelta(seconds=120)


def test_waits_while_an_earlier_dag_run_is_still_running(db):
    ctx0, night0 = _persist(0)
    EvaluateGateOperator(task_id="evaluate_gate", run=night0).execute(ctx0)
    ctx2, night2 = _persist(2)
    earlier = SimpleNamespace(run_id="backfill__night1", logical_date=FIRST_NIGHT + timedelta(days=1))
    ctx2["ti"].previous_dagruns["running"] = earlier  # created by the backfill, not persisted yet
    op = EvaluateGateOperator(task_id="evaluate_gate", run=night2)
    with pytest.raises(TaskDeferred):
        op.execute(ctx2)

    ctx2["ti"].previous_dagruns.clear()  # that DAG run finished
    op.resume(ctx2, event=None, waiting_since=datetime.now(timezone.utc).isoformat())
    assert ctx2["ti"].pushed["return_value"]["trusted"] is True


def test_earlier_dag_run_outside_a_full_window_is_not_waited_for(db):
    for night in (1, 2):
        ctx, persisted = _persist(night)
        EvaluateGateOperator(task_id="evaluate_gate", run=persisted).execute(ctx)
    ctx3, night3 = _persist(3)
    ctx3["ti"].previous_dagruns["running"] = SimpleNamespace(run_id="backfill__night0", logical_date=FIRST_NIGHT)
    EvaluateGateOperator(task_id="evaluate_gate", run=night3, history_limit=2).execute(ctx3)
    assert ctx3["ti"].pushed["return_value"]["trusted"] is True


@pytest.mark.parametrize("bad", ["-5", "soon", float("nan")])
def test_bad_wait_timeout_fails_without_retry(db, bad):
    ctx, persisted = _persist(0)
    with pytest.raises(AirflowFailException, match="wait_timeout"):
        EvaluateGateOperator(task_id="evaluate_gate", run=persisted, wait_timeout=bad).execute(ctx)


def test_unknown_store_run_fails_at_once_even_with_an_earlier_dag_run_running(db):
    _persist(0)
    ctx = context(logical_date=FIRST_NIGHT + timedelta(days=3))
    ctx["ti"].previous_dagruns["running"] = SimpleNamespace(run_id="backfill__night2",
                                                            logical_date=FIRST_NIGHT + timedelta(days=2))
    with pytest.raises(AirflowFailException, match="no run"):
        EvaluateGateOperator(task_id="evaluate_gate", run="af-unknown").execute(ctx)
