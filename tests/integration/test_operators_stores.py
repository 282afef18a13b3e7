"""The four operators in a row, night after night, on both stores through the Airflow connection.

SQLite, and PostgreSQL (the production store, through PostgresHook): the same nights give the same
runs, statuses and rows on either.
"""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone

import pytest
from _fakes import night_context
from _stores import StoreDatabase
from airflow.sdk.exceptions import AirflowFailException

from airflow_metric_gate.operators.evaluate import EvaluateGateOperator
from airflow_metric_gate.operators.ingest import IngestRecordOperator
from airflow_metric_gate.operators.persist import PersistValuesOperator
from airflow_metric_gate.operators.select import SelectStepsOperator

FIRST_NIGHT = datetime(2026, 11, 1, tzinfo=timezone.utc)


@pytest.fixture
def db(store_url, monkeypatch):
    """The store the ``metric_gate_db`` connection points at, once per backend."""
    monkeypatch.setenv("AIRFLOW_CONN_METRIC_GATE_DB", store_url)
    return StoreDatabase(store_url)


@pytest.fixture
def gate(db, tmp_path):
    """Run the four operators for one night, each fed the previous one's output."""
    gates = tmp_path / "gates.yaml"
    gates.write_text("gates:\n  - metric_key: rollout/raw_reward\n    enforce: true\n  - metric_key: train/grad_norm\n")

    def run(night: int, reward: float, *, try_number: int = 1, grad: float = 1.0):
        record = tmp_path / f"night{night}.jsonl"
        lines = [
            {"metric": "rollout/raw_reward", "series": [[s, reward] for s in range(4)]},
            {"metric": "train/grad_norm", "series": [[s, grad] for s in range(4)]},
        ]
        record.write_text("".join(json.dumps(line) + "\n" for line in lines))
        ctx = night_context(FIRST_NIGHT + timedelta(days=night), run_id=f"scheduled__night{night}", task_id="t",
                            try_number=try_number)
        summary = IngestRecordOperator(task_id="ingest_record", location=str(record)).execute(ctx)
        selection = SelectStepsOperator(task_id="select_steps", record=summary, gates_file=str(gates)).execute(ctx)
        persisted = PersistValuesOperator(
            task_id="persist_values", series="rl-7b", suite="nightly-8xh100", selection=selection
        ).execute(ctx)
        EvaluateGateOperator(task_id="evaluate_gate", run=persisted, enforce=True).execute(ctx)
        return persisted, ctx["ti"].pushed["return_value"]

    return run


def _one(db, sql, *params):
    ((value,),) = db.query(sql, *params)
    return value


def test_history_then_regression(gate, db):
    for night in range(3):
        _, verdict = gate(night, 0.8)
        assert verdict["trusted"] is True

    with pytest.raises(AirflowFailException, match="NOT-TRUSTED"):
        gate(3, 0.4)

    assert _one(db, "SELECT COUNT(*) FROM runs WHERE status = 'trusted' AND role = 'baseline'") == 3
    assert _one(db, "SELECT COUNT(*) FROM runs WHERE status = 'untrusted'") == 1


def test_a_retry_replaces_the_rows_of_its_run(gate, db):
    persisted, _ = gate(0, 0.8)
    again, _ = gate(0, 0.8, try_number=2)
    assert again["run_id"] == persisted["run_id"]
    assert _one(db, "SELECT COUNT(*) FROM runs") == 1
    assert _one(db, "SELECT COUNT(*) FROM metric_values WHERE run_id = ?", persisted["run_id"]) == 8


def test_show_blocks_as_the_enforced_evaluation_did(gate, db, capsys):
    from airflow_metric_gate.cli import main

    for night in range(3):
        gate(night, 0.8)
    with pytest.raises(AirflowFailException, match="NOT-TRUSTED"):
        gate(3, 0.8, grad=5.0)  # only grad_norm fails: it blocks through the task's enforce=True
    run_id = _one(db, "SELECT run_id FROM runs WHERE status = 'untrusted'")
    capsys.readouterr()  # the operators' log lines
    assert main(["show", run_id, "--store", db.url, "--json"]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert shown["enforced"] is True and shown["blocking"] == 4

