"""Run a DAG with ``dag.test()`` in a process of its own and report what happened as JSON.

Used by ``tests/dags/conftest.py``; not a test module.  Airflow reads its configuration
(``AIRFLOW_HOME``, the metadata database, the DAG bundles) when it is first imported, so DAG tests
run here, in a child process started with the test session's environment, and never in the pytest
process itself.

Usage::

    python _dag_runner.py test '{"runs": [{"dag_file": "...", "dag_id": "...", "conf": {...}, "logical_date": "..."}]}'
    python _dag_runner.py inspect '{"dag_id": "...", "run_id": "..."}'
    python _dag_runner.py serve

``test`` runs the given DAG runs one after the other in this one process: Airflow's start-up cost
(several seconds, mostly the in-process execution API) is paid once, not once per run.  Each run
starts with a line :data:`RUN_PREFIX` ``<index>`` and ends with its report.  ``inspect`` reports on
a run made elsewhere (``airflow dags test``); without ``run_id`` it picks the DAG's latest run.
Every report is printed on one line after :data:`RESULT_PREFIX`.

``serve`` keeps one process for many tests: it reads one request a line from stdin
(``{"command": "test" | "inspect", "options": {...}, "env": {...}}``), sets ``env`` in its own
environment for that request only (connections, ``AIRFLOW_CONN_*``, are looked up when a task asks
for them), answers as above and ends each answer with :data:`DONE_PREFIX`.  Airflow's start-up (some
8 seconds: imports and the in-process execution API) is then paid once per test process, not once
per test.  A request that changes Airflow's configuration (``AIRFLOW__*``) needs a process of its
own, since parts of the configuration are read once; the test fixture sends those elsewhere.
"""

from __future__ import annotations

import json
import os
import sys
import traceback
from datetime import datetime
from typing import Any

RESULT_PREFIX = "@@metric-gate-dag-result@@ "
RUN_PREFIX = "@@metric-gate-dag-run@@ "
DONE_PREFIX = "@@metric-gate-dag-done@@ "


def _report(dag_id: str, run_id: str | None) -> dict[str, Any]:
    from airflow.models.dagrun import DagRun
    from airflow.models.taskinstance import TaskInstance
    from airflow.models.xcom import XComModel
    from airflow.utils.session import create_session
    from sqlalchemy import select

    with create_session() as session:
        query = select(DagRun).where(DagRun.dag_id == dag_id)
        if run_id is not None:
            query = query.where(DagRun.run_id == run_id)
        dag_run = session.scalars(query.order_by(DagRun.id.desc()).limit(1)).first()
        if dag_run is None:
            return {"error": f"no run of DAG {dag_id!r}"}
        tis = session.scalars(
            select(TaskInstance).where(TaskInstance.dag_id == dag_id, TaskInstance.run_id == dag_run.run_id)
        ).all()
        xcoms = session.scalars(XComModel.get_many(run_id=dag_run.run_id, dag_ids=dag_id, key="return_value")).all()

        def name(task_id: str, map_index: int) -> str:
            return task_id if map_index < 0 else f"{task_id}[{map_index}]"

        return {
            "dag_id": dag_id,
            "run_id": dag_run.run_id,
            "run_type": str(dag_run.run_type.value if hasattr(dag_run.run_type, "value") else dag_run.run_type),
            "state": str(dag_run.state),
            "tasks": {
                name(ti.task_id, ti.map_index): {"state": str(ti.state), "try_number": ti.try_number} for ti in tis
            },
            "xcom": {name(x.task_id, x.map_index): XComModel.deserialize_value(x) for x in xcoms},
        }


def _test(options: dict[str, Any]) -> dict[str, Any]:
    from airflow.dag_processing.dagbag import DagBag

    bag = DagBag(dag_folder=options["dag_file"])
    if bag.import_errors:
        return {"error": "DAG file failed to import", "import_errors": dict(bag.import_errors)}
    dag = bag.dags.get(options["dag_id"])
    if dag is None:
        return {"error": f"no DAG {options['dag_id']!r} in {options['dag_file']}", "dags": sorted(bag.dags)}
    kwargs: dict[str, Any] = {"run_conf": options.get("conf")}
    if options.get("logical_date") == "none":  # a run without a logical date, as `airflow dags trigger` makes
        kwargs["logical_date"] = None
    elif options.get("logical_date"):
        kwargs["logical_date"] = datetime.fromisoformat(options["logical_date"])
    dag_run = dag.test(**kwargs)
    return _report(dag.dag_id, dag_run.run_id)


def _emit(line: str) -> None:
    """Write one report line with its newline in one go (another thread's log line must not land inside it)."""
    sys.stderr.flush()
    sys.stdout.flush()
    data = (line + "\n").encode()
    while data:
        data = data[os.write(sys.stdout.fileno(), data):]


def _answer(command: str, options: dict[str, Any]) -> None:
    if command == "test":
        for index, run in enumerate(options["runs"]):
            _emit(f"{RUN_PREFIX}{index}")
            result = _test(run)
            _emit(RESULT_PREFIX + json.dumps(result, default=str))
            if "error" in result:
                break
    elif command == "inspect":
        _emit(RESULT_PREFIX + json.dumps(_report(options["dag_id"], options.get("run_id")), default=str))
    else:
        raise SystemExit(f"unknown command {command!r}")


def _serve() -> None:
    for line in sys.stdin:
        request = json.loads(line)
        added: dict[str, str | None] = {key: os.environ.get(key) for key in request.get("env") or {}}
        os.environ.update(request.get("env") or {})
        status = "ok"
        try:
            _answer(request["command"], request["options"])
        except Exception as exc:  # report it and stay up for the next request
            traceback.print_exc()
            _emit(RESULT_PREFIX + json.dumps({"error": f"{type(exc).__name__}: {exc}"}))
            status = "error"
        finally:
            for key, value in added.items():
                if value is None:
                    os.environ.pop(key, None)
                else:
                    os.environ[key] = value
        _emit(DONE_PREFIX + status)


def main() -> int:
    command = sys.argv[1]
    # Task logs and the markers below share one pipe: flush every line so they stay in order.
    sys.stdout.reconfigure(line_buffering=True)
    if command == "serve":
        _serve()
    else:
        _answer(command, json.loads(sys.argv[2]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
