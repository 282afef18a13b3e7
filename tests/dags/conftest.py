"""An Airflow installation of its own for DAG tests, and helpers to run DAGs in it.

The ``airflow_env`` session fixture creates a temporary ``AIRFLOW_HOME`` with a SQLite metadata
database (``airflow db migrate``), no example DAGs, and two DAG bundles: ``dags-folder`` (the
repository's ``dags/``) and ``scratch`` (a temporary folder where a test can drop a DAG file of its
own).  ``dag.test()`` needs the DAG serialized in the metadata database and looks it up through
the configured bundles, which is why a throwaway DAG must live in a bundle folder.

Airflow reads its configuration when first imported, and the unit tests import it in the pytest
process with whatever configuration the machine has.  So every DAG run happens in a child process
(``_dag_runner.py`` or the ``airflow`` command) started with this installation's environment;
nothing here changes the pytest process's own environment.  DAG runs go to one long-lived runner
process per test process (``_dag_runner.py serve``), which pays Airflow's start-up once; a run whose
environment changes Airflow's configuration (``AIRFLOW__*``) gets a process of its own.
"""

from __future__ import annotations

import json
import os
import queue
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]
RUNNER = Path(__file__).with_name("_dag_runner.py")
RESULT_PREFIX = "@@metric-gate-dag-result@@ "
RUN_PREFIX = "@@metric-gate-dag-run@@ "
DONE_PREFIX = "@@metric-gate-dag-done@@ "
AIRFLOW_BIN = Path(sys.executable).with_name("airflow")
SCRATCH_BUNDLE = "scratch"


@dataclass
class DagRunResult:
    """What a DAG run did, as read back from the metadata database.

    :param state: the DAG run's final state (``success``, ``failed``).
    :param run_id: the Airflow run id.
    :param run_type: ``manual``, ``scheduled``, ...
    :param tasks: task id (``task_id[map_index]`` when mapped) -> ``{"state", "try_number"}``.
    :param xcom: task id -> its ``return_value`` XCom.
    :param output: everything the process printed (task logs included).
    """

    state: str
    run_id: str
    run_type: str
    tasks: dict[str, dict[str, Any]]
    xcom: dict[str, Any]
    output: str = field(repr=False)

    def task_state(self, task_id: str) -> str:
        """Return one task's final state.

        :param task_id: the task id (``task_id[map_index]`` for a mapped task).
        """
        return self.tasks[task_id]["state"]


class _RunnerProcess:
    """One ``_dag_runner.py serve`` process, answering one request at a time (see its docstring).

    :param env: the environment it starts with.
    :param cwd: its working directory.
    """

    def __init__(self, env: dict[str, str], cwd: Path) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, str(RUNNER), "serve"],
            env=env,
            cwd=cwd,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        self.lines: queue.Queue[str | None] = queue.Queue()
        threading.Thread(target=self._pump, daemon=True).start()

    def _pump(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.put(line)
        self.lines.put(None)  # the process ended

    def request(
        self,
        request: dict[str, Any],
        *,
        timeout: float,
        on_line: Callable[[str], None] | None,
    ) -> tuple[str, str]:
        """Send one request; return ``(status, output)``: ``ok``, ``error``, ``dead``, ``timeout``, or ``gone``
        (the process had ended before the request).

        :param request: the request (``command``, ``options``, ``env``).
        :param timeout: seconds to wait for its answer.
        :param on_line: called with every output line as it arrives.
        """
        while True:  # what a background thread printed after the last answer belongs to no run
            try:
                if self.lines.get_nowait() is None:
                    return "gone", ""
            except queue.Empty:
                break
        assert self.proc.stdin is not None
        try:
            self.proc.stdin.write(json.dumps(request) + "\n")
            self.proc.stdin.flush()
        except OSError:
            return "gone", ""
        lines: list[str] = []
        deadline = time.monotonic() + timeout
        while True:
            try:
                line = self.lines.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                return "timeout", "".join(lines)
            if line is None:
                return "dead", "".join(lines)
            if line.startswith(DONE_PREFIX):
                return line[len(DONE_PREFIX) :].strip(), "".join(lines)
            lines.append(line)
            if on_line is not None:
                on_line(line)

    def stop(self) -> None:
        """End the process (it ends when its stdin closes; killed if it does not)."""
        try:
            if self.proc.stdin is not None:
                self.proc.stdin.close()
            self.proc.wait(timeout=15)
        except (OSError, subprocess.TimeoutExpired):
            self.proc.kill()
            self.proc.wait()


@dataclass
class AirflowEnv:
    """A throwaway Airflow installation (see the module docstring).

    :param home: its ``AIRFLOW_HOME``.
    :param dags_folder: the ``dags-folder`` bundle (the repository's ``dags/``).
    :param scratch_dags: the ``scratch`` bundle, for DAG files written by tests.
    :param env: the environment its processes run with.
    """

    home: Path
    dags_folder: Path
    scratch_dags: Path
    env: dict[str, str]
    _server: _RunnerProcess | None = field(default=None, repr=False)

    def close(self) -> None:
        """Stop the long-lived DAG runner process, if one was started."""
        if self._server is not None:
            self._server.stop()
            self._server = None

    def _request(
        self, request: dict[str, Any], *, timeout: float, on_line: Callable[[str], None] | None
    ) -> tuple[int, str]:
        """Send a request to the long-lived runner process; return ``(exit, output)``."""
        for _ in range(2):  # a process that ended after an earlier test's request is started again
            if self._server is None:
                self._server = _RunnerProcess(self.env, self.home)
            status, output = self._server.request(request, timeout=timeout, on_line=on_line)
            if status != "gone":
                break
            self._server.stop()
            self._server = None
        if status in ("dead", "timeout", "gone"):
            self.close()
            if status == "timeout":
                pytest.fail(f"DAG runner {request['command']} did not finish in {timeout}s:\n{output[-5000:]}")
        return (0 if status == "ok" else 1), output

    def run(
        self,
        args: list[str],
        *,
        timeout: float = 600,
        on_line: Callable[[str], None] | None = None,
        env: dict[str, str] | None = None,
    ) -> subprocess.CompletedProcess[str]:
        """Run a command in this installation's environment, merging stderr into stdout.

        :param args: the command line.
        :param timeout: seconds before the process is killed and the test fails.
        :param on_line: called with every output line as it arrives (e.g. to act when a task defers).
        :param env: variables added to the installation's environment for this command only
            (e.g. ``AIRFLOW_CONN_METRIC_GATE_DB``).
        """
        proc = subprocess.Popen(
            args,
            env={**self.env, **(env or {})},
            cwd=self.home,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        lines: list[str] = []

        def pump() -> None:
            assert proc.stdout is not None
            for line in proc.stdout:
                lines.append(line)
                if on_line is not None:
                    on_line(line)

        reader = threading.Thread(target=pump, daemon=True)
        reader.start()
        try:
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
            reader.join(5)
            pytest.fail(f"{' '.join(args[:3])} ... did not finish in {timeout}s:\n{''.join(lines)[-5000:]}")
        reader.join(30)
        return subprocess.CompletedProcess(args, proc.returncode, "".join(lines), "")

    def airflow(
        self, *args: str, timeout: float = 600, env: dict[str, str] | None = None
    ) -> subprocess.CompletedProcess[str]:
        """Run the ``airflow`` command line.

        :param args: its arguments, e.g. ``("dags", "test", "nightly_metric_gate")``.
        :param timeout: seconds before the test fails.
        :param env: variables added to the environment for this command only.
        """
        return self.run([str(AIRFLOW_BIN), *args], timeout=timeout, env=env)

    def _runner(
        self,
        command: str,
        options: dict[str, Any],
        *,
        timeout: float = 600,
        on_line: Callable[[str], None] | None = None,
        env: dict[str, str] | None = None,
    ) -> list[DagRunResult]:
        if any(key.startswith("AIRFLOW__") for key in env or {}):  # configuration: a process of its own
            proc = self.run([sys.executable, str(RUNNER), command, json.dumps(options)], timeout=timeout,
                            on_line=on_line, env=env)
            returncode, stdout = proc.returncode, proc.stdout
        else:  # the long-lived runner process (started on first use)
            returncode, stdout = self._request({"command": command, "options": options, "env": env or {}},
                                               timeout=timeout, on_line=on_line)
        payloads: list[dict[str, Any]] = []
        outputs: list[list[str]] = [[]]  # what came before the first run goes with it
        started = False
        for line in stdout.splitlines(keepends=True):
            if line.startswith(RUN_PREFIX):
                if started:
                    outputs.append([])
                started = True
            outputs[-1].append(line)
            if line.startswith(RESULT_PREFIX):  # the report; a log line written meanwhile may follow it
                payloads.append(json.JSONDecoder().raw_decode(line[len(RESULT_PREFIX) :])[0])
        expected = len(options["runs"]) if command == "test" else 1
        if returncode != 0 or len(payloads) != expected or any("error" in p for p in payloads):
            pytest.fail(f"DAG runner {command} failed (exit {returncode}): {payloads}\n{stdout[-8000:]}")
        if len(outputs) != len(payloads):  # output not attributable to runs: give each run all of it
            outputs = [[stdout]] * len(payloads)
        return [
            DagRunResult(
                state=payload["state"],
                run_id=payload["run_id"],
                run_type=payload["run_type"],
                tasks=payload["tasks"],
                xcom=payload["xcom"],
                output="".join(output),
            )
            for payload, output in zip(payloads, outputs)
        ]

    def dag_test(
        self,
        dag_id: str,
        *,
        dag_file: Path | str | None = None,
        conf: dict[str, Any] | None = None,
        logical_date: str | None = None,
        timeout: float = 600,
        on_line: Callable[[str], None] | None = None,
        env: dict[str, str] | None = None,
    ) -> DagRunResult:
        """Run a DAG once with ``dag.test()`` (tasks and triggers run in line) and report on the run.

        :param dag_id: the DAG id.
        :param dag_file: the file defining it, inside one of the two bundle folders; default
            ``<dags folder>/<dag_id>.py``.
        :param conf: the run's ``conf`` (DAG params).
        :param logical_date: ISO 8601 logical date; default now; ``"none"`` for a run without one
            (what ``airflow dags trigger`` makes in Airflow 3).
        :param timeout: seconds before the test fails.
        :param on_line: called with every output line as it arrives.
        :param env: variables added to the environment for this run only.
        """
        run = {"dag_id": dag_id, "dag_file": dag_file, "conf": conf, "logical_date": logical_date}
        return self.dag_tests([run], timeout=timeout, on_line=on_line, env=env)[0]

    def dag_tests(
        self,
        runs: list[dict[str, Any]],
        *,
        timeout: float = 600,
        on_line: Callable[[str], None] | None = None,
        env: dict[str, str] | None = None,
    ) -> list[DagRunResult]:
        """Run DAGs with ``dag.test()`` one after the other in one process; report on each run.

        One process pays Airflow's start-up cost once, so a test that needs several nights runs
        them in a few seconds.  Every run's ``output`` holds what was printed during that run.

        :param runs: one mapping per run, with the keys of :meth:`dag_test` (``dag_id``, and
            optionally ``dag_file``, ``conf``, ``logical_date``).
        :param timeout: seconds before the test fails (all runs together).
        :param on_line: called with every output line as it arrives; a line starting with
            ``RUN_PREFIX`` and the run's index marks where each run starts.
        :param env: variables added to the environment for these runs only.
        """
        options = []
        for run in runs:
            dag_file = run.get("dag_file")
            path = Path(dag_file) if dag_file is not None else self.dags_folder / f"{run['dag_id']}.py"
            options.append(
                {
                    "dag_file": str(path),
                    "dag_id": run["dag_id"],
                    "conf": run.get("conf"),
                    "logical_date": run.get("logical_date"),
                }
            )
        return self._runner("test", {"runs": options}, timeout=timeout, on_line=on_line, env=env)

    def inspect(self, dag_id: str, run_id: str | None = None) -> DagRunResult:
        """Report on a run made elsewhere (e.g. by ``airflow dags test``); default the latest run.

        :param dag_id: the DAG id.
        :param run_id: the Airflow run id.
        """
        return self._runner("inspect", {"dag_id": dag_id, "run_id": run_id}, timeout=300)[0]


@pytest.fixture(scope="session")
def airflow_env(tmp_path_factory: pytest.TempPathFactory) -> Iterator[AirflowEnv]:
    """A migrated throwaway Airflow installation shared by the session's DAG tests."""
    home = tmp_path_factory.mktemp("airflow_home")
    scratch = tmp_path_factory.mktemp("scratch_dags")
    dags_folder = REPO_ROOT / "dags"
    bundles = [
        {
            "name": "dags-folder",
            "classpath": "airflow.dag_processing.bundles.local.LocalDagBundle",
            "kwargs": {},
        },
        {
            "name": SCRATCH_BUNDLE,
            "classpath": "airflow.dag_processing.bundles.local.LocalDagBundle",
            "kwargs": {"path": str(scratch)},
        },
    ]
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AIRFLOW__", "AIRFLOW_CONN_", "AIRFLOW_VAR_"))}
    env.update(
        {
            "AIRFLOW_HOME": str(home),
            "AIRFLOW__CORE__DAGS_FOLDER": str(dags_folder),
            "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
            "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": f"sqlite:///{home / 'airflow.db'}",
            "AIRFLOW__DAG_PROCESSOR__DAG_BUNDLE_CONFIG_LIST": json.dumps(bundles),
            "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO_ROOT), os.environ.get("PYTHONPATH")])),
        }
    )
    environment = AirflowEnv(home=home, dags_folder=dags_folder, scratch_dags=scratch, env=env)
    migrate = environment.airflow("db", "migrate", timeout=900)
    if migrate.returncode != 0:
        pytest.fail(f"airflow db migrate failed:\n{migrate.stdout[-8000:]}")
    try:
        yield environment
    finally:
        environment.close()
