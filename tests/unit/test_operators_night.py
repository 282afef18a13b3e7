"""Which night a run is stored under, and what a shadow run's log says (runs without a logical date)."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest
from _fakes import context
from airflow.sdk.exceptions import AirflowFailException

from airflow_metric_gate.declarations import declare
from airflow_metric_gate.operators.evaluate import EvaluateGateOperator
from airflow_metric_gate.operators.persist import PersistValuesOperator
from airflow_metric_gate.pipeline import selection_to_payload
from airflow_metric_gate.selection import Selection

# These tests give PersistValuesOperator its values inline (the deprecated version 1 selection).
pytestmark = pytest.mark.filterwarnings("ignore:a selection with its values inline:DeprecationWarning")

CONSTRAINT = {"rel_up": 0.5, "rel_down": 0.2}
FIRST_NIGHT = datetime(2026, 11, 1, tzinfo=timezone.utc)
TRIGGERED = datetime(2026, 12, 3, 9, 15, tzinfo=timezone.utc)  # when someone ran `airflow dags trigger`


def _selection(reward: float = 0.8, *, enforce: bool = False) -> dict:
    declaration = declare("rollout/raw_reward", steps="all", constraint=CONSTRAINT, enforce=enforce)
    return selection_to_payload([Selection(declaration, points=[(s, reward, s) for s in range(3)])])


def _persist(**kwargs) -> PersistValuesOperator:
    kwargs.setdefault("selection", _selection())
    return PersistValuesOperator(task_id="persist_values", series="rl-7b", **kwargs)


def _triggered(run_type: str = "manual", **ti) -> dict:
    """The context of a run made by `airflow dags trigger`: no logical date, run_after = now."""
    ti.setdefault("run_id", f"{run_type}__{TRIGGERED.isoformat()}")
    ctx = context(run_type=run_type, logical_date=None, **ti)
    ctx["dag_run"].run_after = TRIGGERED
    return ctx


def _stored(db) -> list[tuple]:
    return db.query("SELECT logical_date, role FROM runs") if "runs" in db.tables() else []


def test_baseline_run_without_logical_date_takes_its_night_from_the_night_param(db):
    result = _persist(role="baseline", night="2026-11-28").execute(_triggered())
    assert (result["role"], result["logical_date"]) == ("baseline", "2026-11-28T00:00:00+00:00")
    assert _stored(db) == [("2026-11-28T00:00:00.000000+00:00", "baseline")]


def test_night_param_wins_over_the_logical_date(db):
    ctx = context(run_type="scheduled", logical_date=FIRST_NIGHT)
    assert _persist(night="2026-11-28T00:00:00Z").execute(ctx)["logical_date"] == "2026-11-28T00:00:00+00:00"


def test_empty_night_param_falls_back_to_the_logical_date(db):
    ctx = context(run_type="scheduled", logical_date=FIRST_NIGHT)
    assert _persist(night="").execute(ctx)["logical_date"] == FIRST_NIGHT.isoformat()


def test_baseline_run_with_neither_night_nor_logical_date_is_refused_and_stores_nothing(db):
    with pytest.raises(AirflowFailException) as err:
        _persist(role="baseline").execute(_triggered())
    message = str(err.value)
    assert "no logical date" in message and "night" in message
    assert """--conf '{"night": "YYYY-MM-DD"}'""" in message
    assert "--logical-date" in message
    assert _stored(db) == []


def test_unparsable_night_is_refused_without_retry(db):
    with pytest.raises(AirflowFailException, match="night"):
        _persist(night="30/11/2026").execute(_triggered())
    assert _stored(db) == []


def test_shadow_run_without_logical_date_is_stored_at_its_trigger_time(db):
    # a shadow run feeds no baseline, so when it ran is all it needs
    result = _persist().execute(_triggered())
    assert (result["role"], result["logical_date"]) == ("shadow", TRIGGERED.isoformat())


def test_night_is_templated():
    assert "night" in PersistValuesOperator.template_fields


def _history(nights: int = 3) -> None:
    for night in range(nights):
        ctx = context(run_type="scheduled", logical_date=FIRST_NIGHT + timedelta(days=night), run_id=f"s{night}")
        persisted = _persist().execute(ctx)
        EvaluateGateOperator(task_id="evaluate_gate", run=persisted, enforce=True).execute(ctx)


def test_shadow_run_log_says_so_before_the_table_and_never_that_it_fails(db, capsys):
    _history()
    ctx = _triggered(run_id="manual__2026-12-03")  # what `airflow dags test` makes: a manual run
    persisted = _persist(selection=_selection(0.1, enforce=True), night="2026-11-04").execute(ctx)
    capsys.readouterr()

    EvaluateGateOperator(task_id="evaluate_gate", run=persisted, enforce=True).execute(ctx)  # does not raise

    captured = capsys.readouterr()
    lines = (captured.out + captured.err).splitlines()
    shadow = [i for i, line in enumerate(lines) if "shadow run" in line.lower() and "baseline" in line]
    table = next(i for i, line in enumerate(lines) if "rollout/raw_reward" in line)
    assert shadow and shadow[0] < table, lines
    line = lines[shadow[0]]
    assert "neither fails" in line and "history" in line
    assert "role" in line and ("scheduled" in line or "backfill" in line)
    assert ctx["ti"].pushed["return_value"]["blocking"] > 0  # enforced FAILs were there to report
    assert not any("fails the gate" in line for line in lines), lines


def test_baseline_run_log_has_no_shadow_line(db, capsys):
    _history(1)
    capsys.readouterr()
    ctx = context(run_type="scheduled", logical_date=FIRST_NIGHT + timedelta(days=5), run_id="s5")
    EvaluateGateOperator(task_id="evaluate_gate", run=_persist().execute(ctx)).execute(ctx)
    captured = capsys.readouterr()
    assert "shadow run" not in (captured.out + captured.err).lower()
