"""The REST client and the handle of a running Airflow deployment, shared by the system tests."""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest
from _gate_data import store_query

LOG_TAIL_LINES = 60


class ApiError(AssertionError):
    """The REST API answered with an unexpected status."""


@dataclass
class RestClient:
    """The Airflow 3 public REST API (``/api/v2``) with a bearer token.

    :param base_url: ``http://127.0.0.1:<port>``.
    :param token: the JWT from ``/auth/token``.
    """

    base_url: str
    token: str = ""

    def request(self, method: str, path: str, body: Any = None, *, expect: tuple[int, ...] = (200,)) -> Any:
        """Send one request; return the decoded JSON answer.

        :param method: ``GET``, ``POST``, ...
        :param path: the path below the base URL, e.g. ``/api/v2/dags``.
        :param body: a JSON-serialisable request body.
        :param expect: the statuses that count as success.
        """
        data = None if body is None else json.dumps(body).encode()
        headers = {"Accept": "application/json"}
        if data is not None:
            headers["Content-Type"] = "application/json"
        if self.token:
            headers["Authorization"] = f"Bearer {self.token}"
        req = urllib.request.Request(self.base_url + path, data=data, method=method, headers=headers)
        try:
            with urllib.request.urlopen(req, timeout=30) as resp:
                status, text = resp.status, resp.read().decode()
        except urllib.error.HTTPError as err:
            status, text = err.code, err.read().decode(errors="replace")
        if status not in expect:
            raise ApiError(f"{method} {path} answered {status}: {text[:2000]}")
        return json.loads(text) if text else None

    def get(self, path: str, *, expect: tuple[int, ...] = (200,)) -> Any:
        """``GET`` a path.

        :param path: the path below the base URL.
        :param expect: the statuses that count as success.
        """
        return self.request("GET", path, expect=expect)

    def post(self, path: str, body: Any, *, expect: tuple[int, ...] = (200,)) -> Any:
        """``POST`` a JSON body.

        :param path: the path below the base URL.
        :param body: the request body.
        :param expect: the statuses that count as success.
        """
        return self.request("POST", path, body, expect=expect)

    def dag_runs(self, dag_id: str) -> list[dict[str, Any]]:
        """Return every run of a DAG.

        :param dag_id: the DAG id.
        """
        return self.get(f"/api/v2/dags/{quote(dag_id)}/dagRuns?limit=100")["dag_runs"]

    def task_instances(self, dag_id: str, run_id: str) -> dict[str, dict[str, Any]]:
        """Return a run's task instances by task id.

        :param dag_id: the DAG id.
        :param run_id: the Airflow run id.
        """
        answer = self.get(f"/api/v2/dags/{quote(dag_id)}/dagRuns/{quote(run_id, safe='')}/taskInstances?limit=100")
        return {ti["task_id"]: ti for ti in answer["task_instances"]}

    def xcom_return_value(self, dag_id: str, run_id: str, task_id: str) -> Any:
        """Return a task's XCom ``return_value`` (the API's native JSON form: a dict stays a dict).

        :param dag_id: the DAG id.
        :param run_id: the Airflow run id.
        :param task_id: the task id.
        """
        entry = self.get(
            f"/api/v2/dags/{quote(dag_id)}/dagRuns/{quote(run_id, safe='')}/taskInstances/"
            f"{quote(task_id)}/xcomEntries/return_value"
        )
        return entry["value"]


@dataclass
class AirflowStack:
    """A running Airflow deployment (see the module docstring).

    :param tmp: the temporary folder holding everything (home, logs, records).
    :param env: the environment every component runs with.
    :param api: the REST client, with a token.
    :param store_url: the metric store's database (plain ``postgresql://`` URL).
    :param logs: component name -> its log file.
    """

    tmp: Path
    env: dict[str, str]
    api: RestClient
    store_url: str
    logs: dict[str, Path] = field(default_factory=dict)

    def store_query(self, sql: str, *params: Any) -> list[tuple]:
        """Run one query on the metric store (``%s`` placeholders).

        :param sql: the statement.
        :param params: its parameters.
        """
        return store_query(self.store_url, sql, *params)

    def tails(self, lines: int = LOG_TAIL_LINES) -> str:
        """Return the last lines of every component's log.

        :param lines: how many lines per component.
        """
        parts = []
        for name, path in self.logs.items():
            try:
                text = path.read_text(errors="replace").splitlines()[-lines:]
            except OSError as err:
                text = [f"(unreadable: {err})"]
            parts.append(f"----- {name} ({path}) -----\n" + "\n".join(text))
        return "\n".join(parts)

    def dag_run_report(self, dag_id: str, run_id: str, lines: int = LOG_TAIL_LINES) -> str:
        """Describe a DAG run for a failure message: every task's state and try, and the log tail of each task
        that did not succeed (its last attempt, as the workers wrote it under ``AIRFLOW_HOME/logs``).

        :param dag_id: the DAG id.
        :param run_id: the Airflow run id.
        :param lines: how many log lines per task that did not succeed.
        """
        instances = self.api.task_instances(dag_id, run_id)
        parts = [f"task instances of {dag_id} / {run_id}:"]
        parts += [f"  {t}: {ti['state']} (try {ti.get('try_number')})" for t, ti in sorted(instances.items())]
        folder = Path(self.env["AIRFLOW_HOME"]) / "logs" / f"dag_id={dag_id}" / f"run_id={run_id}"
        for task_id, ti in sorted(instances.items()):
            if ti["state"] == "success":
                continue
            attempts = sorted((folder / f"task_id={task_id}").glob("attempt=*.log"))
            if not attempts:
                parts.append(f"----- {task_id}: no log under {folder} -----")
                continue
            text = attempts[-1].read_text(errors="replace").splitlines()[-lines:]
            parts.append(f"----- {task_id} ({attempts[-1].name}) -----\n" + "\n".join(text))
        return "\n".join(parts)

    def wait_for(self, what: str, check, timeout: float, interval: float = 2.0) -> Any:
        """Call ``check`` until it returns something truthy; fail with the component logs at the timeout.

        :param what: names the awaited condition in the failure message.
        :param check: a callable without arguments.
        :param timeout: seconds.
        :param interval: seconds between two calls.
        """
        deadline = time.monotonic() + timeout
        last_error: Exception | None = None
        while True:
            try:
                result = check()
                if result:
                    return result
            except (OSError, ApiError, KeyError) as err:
                last_error = err
            if time.monotonic() >= deadline:
                pytest.fail(f"timed out after {timeout:g}s waiting for {what} (last error: {last_error})")
            time.sleep(interval)
