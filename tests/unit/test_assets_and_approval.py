"""Assets in and out, and the approval step, with a real SQLite store and a minimal task context.

In: an asset-triggered run (no logical date) is a baseline run stored under the night its event
names.  Out: the gated metrics event is set on a trusted night and the task skips otherwise.
Approval: each answer is carried out through the store, with the approver in the run's provenance.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest
from _fakes import context
from airflow.sdk.exceptions import AirflowFailException, AirflowSkipException, ParamValidationError

from airflow_metric_gate.declarations import declare
from airflow_metric_gate.operators._shared import run_night, run_role
from airflow_metric_gate.operators.approve import ACCEPT, KEEP, TRUST, ApproveNightOperator, needs_approval
from airflow_metric_gate.operators.assets import (
    PublishGatedMetricsOperator,
    event_night,
    gated_metrics_asset,
)
from airflow_metric_gate.operators.evaluate import EvaluateGateOperator
from airflow_metric_gate.operators.persist import PersistValuesOperator
from airflow_metric_gate.pipeline import selection_to_payload
from airflow_metric_gate.selection import Selection
from airflow_metric_gate.store import open_store

# These tests give PersistValuesOperator its values inline (the deprecated version 1 selection).
pytestmark = pytest.mark.filterwarnings("ignore:a selection with its values inline:DeprecationWarning")

FIRST = datetime(2026, 11, 1, tzinfo=timezone.utc)


@dataclass
class Event:
    extra: dict
    timestamp: datetime
    partition_key: str | None = None


@dataclass
class Outlet:
    extra: dict = field(default_factory=dict)


def _asset_context(events: dict, partition_key: str | None = None) -> dict[str, Any]:
    ctx = context(run_type="asset_triggered", logical_date=None, run_id="asset_triggered__1")
    ctx["dag_run"].partition_key = partition_key
    ctx["triggering_asset_events"] = events
    return ctx


def test_an_asset_triggered_run_is_baseline_and_takes_its_night_from_the_latest_event():
    events = {"training": [Event({"night": "2026-11-02"}, FIRST), Event({"night": "2026-11-03"}, FIRST + timedelta(1))]}
    ctx = _asset_context(events)
    assert run_role("auto", ctx) == "baseline"
    assert run_night(None, "baseline", ctx, "persist_values") == datetime(2026, 11, 3, tzinfo=timezone.utc)
    # a partitioned asset's run: its partition key wins
    assert event_night(events, _asset_context(events, partition_key="2026-11-05")["dag_run"]) == "2026-11-05"


def test_an_asset_event_without_a_night_is_refused_with_how_to_name_it():
    ctx = _asset_context({"training": [Event({}, FIRST)]})
    with pytest.raises(AirflowFailException, match=r'extra \{"night": "YYYY-MM-DD"\}'):
        run_night(None, "baseline", ctx, "persist_values")


def _night(night: int, reward: float, *, enforce: bool = True) -> tuple[dict, dict]:
    declaration = declare("rollout/raw_reward", steps="all", constraint={"rel_up": 0.2, "rel_down": 0.2})
    selection = Selection(declaration, points=[(s, reward, s) for s in range(3)])
    ctx = context(logical_date=FIRST + timedelta(days=night), run_id=f"scheduled__night{night}")
    persisted = PersistValuesOperator(task_id="persist_values", series="rl-7b",
                                      selection=selection_to_payload([selection])).execute(ctx)
    evaluate = EvaluateGateOperator(task_id="evaluate_gate", run=persisted, enforce=enforce)
    try:
        evaluate.execute(ctx)
    except AirflowFailException:
        pass
    return ctx, ctx["ti"].pushed["return_value"]


def test_a_trusted_night_sets_the_gated_event_and_an_untrusted_one_skips(db):
    asset = gated_metrics_asset("rl-7b")
    assert asset.uri == "metric-gate://rl-7b/cuda/default"
    _, good = _night(0, 0.8)
    ctx = {"outlet_events": {asset: Outlet()}}
    op = PublishGatedMetricsOperator(task_id="publish_gated_metrics", verdict=good, outlets=[asset])
    extra = op.execute(ctx)
    assert ctx["outlet_events"][asset].extra == extra
    assert extra == {"schema": good["schema"], "series": "rl-7b", "backend": "cuda", "suite": "default",
                     "run_id": good["run_id"], "logical_date": "2026-11-01T00:00:00+00:00", "night": "2026-11-01",
                     "trusted": True, "counts": good["counts"]}
    json.dumps(extra)
    _, bad = _night(1, 0.4)
    assert bad["trusted"] is False
    untouched = {"outlet_events": {asset: Outlet()}}
    with pytest.raises(AirflowSkipException, match="not trusted"):
        PublishGatedMetricsOperator(task_id="p", verdict=bad, outlets=[asset]).execute(untouched)
    assert untouched["outlet_events"][asset].extra == {}
    with pytest.raises(AirflowSkipException, match="shadow"):
        PublishGatedMetricsOperator(task_id="p", verdict={**good, "role": "shadow"}, outlets=[asset]).execute(ctx)


def _answer(choice: str, reason: str = "dataset v4 lowers the reward", user: str = "alice") -> dict:
    return {"chosen_options": [choice], "params_input": {"reason": reason},
            "responded_at": FIRST, "responded_by_user": {"id": "7", "name": user}}


def _approve(ctx: dict, verdict: dict, choice: str, **kwargs) -> Any:
    ctx["ti"].upstream[("evaluate_gate", -1)] = verdict
    op = ApproveNightOperator(task_id="approve_night", evaluate_task_id="evaluate_gate")
    return op.execute_complete(ctx, _answer(choice, **kwargs))


def _marks(db, run_id: str) -> tuple[str, list]:
    with open_store(db.url) as store:
        run = store.get_run(run_id)
    return run.status, run.provenance.get("marks") or []


def test_only_an_untrusted_night_or_a_level_shift_asks(db):
    _, good = _night(0, 0.8)
    assert not needs_approval(good) and not needs_approval({**good, "role": "shadow", "trusted": False})
    assert needs_approval({**good, "trusted": False})
    assert needs_approval({**good, "level_shifts": [{"since_run_id": "x"}]})
    assert not needs_approval({**good, "level_shifts": [{"since_run_id": "x", "adopted": True}]})
    ctx = context(run_id="scheduled__night0")
    ctx["ti"].upstream[("evaluate_gate", -1)] = good
    with pytest.raises(AirflowSkipException, match="nothing to approve"):
        ApproveNightOperator(task_id="approve_night", evaluate_task_id="evaluate_gate").execute(ctx)


def test_mark_trusted_records_the_approver_and_reason(db):
    _night(0, 0.8)
    ctx, bad = _night(1, 0.4)
    done = _approve(ctx, bad, TRUST, reason="the eval set was rerun")
    assert (done["answer"], done["by"]) == (TRUST, "alice")
    status, marks = _marks(db, bad["run_id"])
    assert status == "trusted"
    assert marks[-1]["by"] == "alice" and "the eval set was rerun" in marks[-1]["reason"]


def test_keep_untrusted_records_the_decision_and_fails_the_task(db):
    _night(0, 0.8)
    ctx, bad = _night(1, 0.4)
    with pytest.raises(AirflowFailException, match="alice kept night 2026-11-02.* untrusted: a real regression"):
        _approve(ctx, bad, KEEP, reason="a real regression")
    status, marks = _marks(db, bad["run_id"])
    assert status == "untrusted"
    assert marks[-1]["by"] == "alice" and "a real regression" in marks[-1]["reason"]


def test_accept_sets_the_new_level_through_accept_level(db):
    _night(0, 0.8)
    ctx, bad = _night(1, 0.4)
    done = _approve(ctx, bad, ACCEPT, user="bob")
    assert (done["since_run_id"], done["nights"], done["marked"]) == (bad["run_id"], 1, 1)
    status, marks = _marks(db, bad["run_id"])
    assert status == "trusted" and marks[-1]["accept"] is True and marks[-1]["by"] == "bob"
    with open_store(db.url) as store:
        assert store.get_run(bad["run_id"]).rebaseline is True


def test_an_answer_without_a_reason_changes_nothing(db):
    _night(0, 0.8)
    ctx, bad = _night(1, 0.4)
    with pytest.raises(ParamValidationError, match="too short"):  # the form's own check
        _approve(ctx, bad, TRUST, reason="ok")
    with pytest.raises(AirflowFailException, match="needs a reason"):  # blanks around too little
        _approve(ctx, bad, TRUST, reason="  ok  ")
    assert _marks(db, bad["run_id"]) == ("untrusted", [])
