"""The "Metric gate" UI app in-process, on a SQLite store, with users the tests choose by a header.

:func:`ui_client` builds the plugin's FastAPI app with two seams replaced: the user comes from the
``X-Test-User`` header (``admin`` may read and edit every DAG, ``viewer`` may read every DAG and edit
none, ``outsider`` may read nothing; no header is 401), and the store is a SQLite file holding
nights of series ``rl`` written by DAG ``nightly``.  Everything else is the app as the api-server
mounts it: routes, schemas, pages, tokens and headers.
"""

from __future__ import annotations

import json
import sqlite3
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from typing import Any

from fastapi import HTTPException, Request
from fastapi.testclient import TestClient

from airflow_metric_gate.declarations import declare
from airflow_metric_gate.pipeline import RunInfo, SeriesIdentity, evaluate, persist, record_warnings
from airflow_metric_gate.plugins import app as app_module
from airflow_metric_gate.plugins import auth
from airflow_metric_gate.plugins.app import create_app
from airflow_metric_gate.plugins.metadata import TaskVerdict
from airflow_metric_gate.records import read_record
from airflow_metric_gate.selection import select_steps
from airflow_metric_gate.store import open_store

DAG_ID = "nightly"
SERIES = ("rl", "cuda", "nightly-8xh100")
USERS = ("admin", "viewer", "outsider")
GATE = declare("rollout/raw_reward", steps="all", constraint={"rel_up": 0.1, "rel_down": 0.1})


@dataclass(frozen=True)
class User:
    """What the plugin asks of a user."""

    name: str

    def get_id(self) -> str:
        return f"id-{self.name}"

    def get_name(self) -> str:
        return self.name


def _user(request: Request) -> User:
    name = request.headers.get("x-test-user")
    if name not in USERS:
        raise HTTPException(401, "not authenticated")
    return User(name)


def _is_authorized(user: Any, dag_id: str | None, method: str) -> bool:
    return user.get_name() == "admin" or (user.get_name() == "viewer" and method == "GET")


def fill_store(url: str, folder) -> dict:
    """Five good nights and a regressed one whose record has a value that is not a number; return the last verdict."""
    verdict: dict = {}
    start = datetime(2026, 11, 1, tzinfo=timezone.utc)
    with open_store(url) as store:
        for night, reward in enumerate([0.8, 0.81, 0.79, 0.8, 0.8, 0.4]):
            path = folder / f"night{night}.jsonl"
            path.write_text(json.dumps({"metric": "rollout/raw_reward",
                                        "series": [[0, reward], [1, reward], [2, None]]}) + "\n")
            record = read_record(path)
            run = RunInfo(f"n{night}", logical_date=start + timedelta(days=night),
                          provenance={"dag_id": DAG_ID, "airflow_run_id": f"scheduled__{night}"})
            persist(store, SeriesIdentity(*SERIES), run, select_steps(record, [GATE]),
                    warnings=record_warnings(record, [GATE]))
            verdict = evaluate(store, run.run_id)
    return verdict


def make_app() -> Any:
    """The plugin's app, its user taken from the ``X-Test-User`` header."""
    app = create_app()
    app.dependency_overrides[auth.current_user] = _user
    return app


def install(monkeypatch, tmp_path) -> dict:
    """Fill a SQLite store under ``tmp_path`` and point the app's seams at it; return the regressed night's verdict."""
    url = f"sqlite:///{tmp_path / 'ui.db'}"
    verdict = fill_store(url, tmp_path)
    monkeypatch.setattr(app_module, "open_ui_store", lambda: open_store(url))

    def task_verdict(dag_id: str, run_id: str, task_id: str, map_index: int) -> TaskVerdict | None:
        with sqlite3.connect(":memory:") as db:  # bound as the metadata database binds them
            db.execute("SELECT ?, ?, ?, ?", (dag_id, run_id, task_id, map_index)).fetchall()
        if (dag_id, run_id, task_id, map_index) == (DAG_ID, "scheduled__5", "evaluate_gate", -1):
            return TaskVerdict("EvaluateGateOperator", "failed", verdict)
        return None

    monkeypatch.setattr(app_module, "task_verdict", task_verdict)
    monkeypatch.setattr(auth, "is_authorized", _is_authorized)
    monkeypatch.setattr(auth, "_secret", lambda: b"test-secret-key-of-the-ui-tests")
    return verdict


def ui_client(monkeypatch, tmp_path, *, raise_server_exceptions: bool = True) -> tuple[TestClient, dict]:
    """The app on a filled store: the client, and the verdict of the regressed night (``n5``)."""
    verdict = install(monkeypatch, tmp_path)
    client = TestClient(make_app(), raise_server_exceptions=raise_server_exceptions, follow_redirects=False)
    return client, verdict


def as_user(name: str) -> dict[str, str]:
    """The request headers of a user."""
    return {"X-Test-User": name}
