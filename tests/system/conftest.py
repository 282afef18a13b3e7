"""A real Airflow 3 deployment for the system tests, started and stopped by the test session.

``airflow_stack`` (module scope) brings up, as subprocesses of this test run:

* a fresh Postgres database for Airflow's metadata (``airflow db migrate``) and another one for
  the metric store (the ``metric_gate_db`` connection, as ``AIRFLOW_CONN_METRIC_GATE_DB``);
* ``airflow api-server``, ``scheduler``, ``dag-processor`` and ``triggerer``, with the
  ``CeleryExecutor``, and ``airflow celery worker`` on the local Redis (a dedicated database
  number and a key prefix of this run only);
* a temporary ``AIRFLOW_HOME``, free ports on 127.0.0.1, and two DAG bundles: the repository's
  ``dags/`` and ``tests/system/dags/``.

Every component gets its own process group and its own log file in the temporary folder; a failing
system test shows the tail of each.  Teardown stops only those process groups, deletes only the
Redis keys under this run's prefix, and drops both databases, also when start-up failed.

Postgres comes from ``METRIC_GATE_TEST_PG_URL`` (as for the other Postgres tests), Redis from
``METRIC_GATE_TEST_REDIS_URL`` (default ``redis://127.0.0.1:6379/11``).  When either is down the
system tests are skipped, unless ``METRIC_GATE_REQUIRE_PG=1`` (CI), where they fail.
"""

from __future__ import annotations

import json
import os
import secrets
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import pytest
from _airflow_stack import AirflowStack, RestClient
from _test_env import database_name, free_port

REPO_ROOT = Path(__file__).resolve().parents[2]
SYSTEM_DAGS = Path(__file__).resolve().parent / "dags"
AIRFLOW_BIN = Path(sys.executable).with_name("airflow")
PG_ADMIN_URL = os.environ.get("METRIC_GATE_TEST_PG_URL", "postgresql://postgres@127.0.0.1:5432/postgres")
REDIS_URL = os.environ.get("METRIC_GATE_TEST_REDIS_URL", "redis://127.0.0.1:6379/11")
REQUIRE_SERVICES = os.environ.get("METRIC_GATE_REQUIRE_PG") == "1"
COMPONENTS = ("api-server", "scheduler", "dag-processor", "triggerer", "celery-worker")
START_TIMEOUT = 240.0
#: Celery worker slots: one per task the system test's DAG runs can run side by side (seven nights of
#: the nightly backfill, three nights of two chains, the sensor), so every night moves in lockstep.
WORKER_SLOTS = 16


def _unavailable(message: str) -> None:
    if REQUIRE_SERVICES:
        pytest.fail(f"{message} (METRIC_GATE_REQUIRE_PG=1: the system test must run)")
    pytest.skip(message)


def _db_url(name: str, scheme: str | None = None) -> str:
    parts = urlsplit(PG_ADMIN_URL)
    return urlunsplit((scheme or parts.scheme, parts.netloc, f"/{name}", parts.query, ""))


class _Processes:
    """The process groups this test run started, and only those."""

    def __init__(self) -> None:
        self.procs: dict[str, subprocess.Popen] = {}
        self.files: list[Any] = []

    def start(self, name: str, args: list[str], env: dict[str, str], log: Path, cwd: Path) -> None:
        handle = log.open("ab")
        self.files.append(handle)
        self.procs[name] = subprocess.Popen(
            args,
            env=env,
            cwd=cwd,
            stdin=subprocess.DEVNULL,
            stdout=handle,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # a process group of its own: stopped as a whole, and alone
        )

    def dead(self) -> list[str]:
        return [f"{name} (exit {proc.returncode})" for name, proc in self.procs.items() if proc.poll() is not None]

    def stop(self, grace: float = 20.0) -> None:
        for proc in self.procs.values():
            _signal_group(proc.pid, signal.SIGTERM)
        deadline = time.monotonic() + grace
        for proc in self.procs.values():
            try:
                proc.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                pass
        for proc in self.procs.values():
            _signal_group(proc.pid, signal.SIGKILL)  # stragglers of the group (task runners, pool children)
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                pass
        for handle in self.files:
            handle.close()


def _signal_group(pgid: int, sig: int) -> None:
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def _connect_services():
    import psycopg2
    import redis

    try:
        admin = psycopg2.connect(PG_ADMIN_URL, connect_timeout=5)
    except Exception as exc:
        _unavailable(f"Postgres not reachable at {PG_ADMIN_URL}: {exc}")
    admin.autocommit = True
    client = redis.Redis.from_url(REDIS_URL, socket_connect_timeout=5)
    try:
        client.ping()
    except Exception as exc:
        admin.close()
        _unavailable(f"Redis not reachable at {REDIS_URL}: {exc}")
    return admin, client


def _delete_prefixed(client, prefix: str) -> None:
    keys = list(client.scan_iter(match=f"{prefix}*", count=500))
    if keys:
        client.delete(*keys)


def _airflow_env(tmp: Path, *, meta_db: str, store_db: str, api_port: int, redis_prefix: str) -> dict[str, str]:
    bundles = [
        {
            "name": "dags-folder",
            "classpath": "airflow.dag_processing.bundles.local.LocalDagBundle",
            "kwargs": {"path": str(REPO_ROOT / "dags")},
        },
        {
            "name": "system-test-dags",
            "classpath": "airflow.dag_processing.bundles.local.LocalDagBundle",
            "kwargs": {"path": str(SYSTEM_DAGS)},
        },
    ]
    meta_url = _db_url(meta_db, "postgresql+psycopg2")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AIRFLOW__", "AIRFLOW_CONN_", "AIRFLOW_VAR_"))}
    env.update(
        {
            "AIRFLOW_HOME": str(tmp / "airflow_home"),
            "PYTHONDONTWRITEBYTECODE": "1",  # no __pycache__ in the repository's DAG folders
            "AIRFLOW__CORE__DAGS_FOLDER": str(REPO_ROOT / "dags"),
            "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
            "AIRFLOW__CORE__EXECUTOR": "CeleryExecutor",
            # The scheduler creates runs (the asset examples' asset-triggered runs need it); the other DAGs'
            # one scheduled run of the latest interval finds no record and waits, deferred, in the triggerer.
            "AIRFLOW__CORE__DAGS_ARE_PAUSED_AT_CREATION": "False",
            "AIRFLOW__SCHEDULER__USE_JOB_SCHEDULE": "True",
            # Full backfill parallelism: a slot for every night of the largest backfill at once.
            "AIRFLOW__CORE__PARALLELISM": str(2 * WORKER_SLOTS),
            "AIRFLOW__CORE__MAX_ACTIVE_TASKS_PER_DAG": str(WORKER_SLOTS),
            "AIRFLOW__CORE__EXECUTION_API_SERVER_URL": f"http://127.0.0.1:{api_port}/execution/",
            # A shared 2-core CI machine can keep the api-server busy for many seconds; the default
            # 5 s makes a worker give up on starting a task and leave it to the heartbeat timeout.
            "AIRFLOW__WORKERS__EXECUTION_API_TIMEOUT": "60",
            "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_ALL_ADMINS": "True",
            "AIRFLOW__API__BASE_URL": f"http://127.0.0.1:{api_port}",
            "AIRFLOW__API__SECRET_KEY": secrets.token_hex(16),
            "AIRFLOW__API_AUTH__JWT_SECRET": secrets.token_hex(32),
            "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": meta_url,
            "AIRFLOW__CELERY__BROKER_URL": REDIS_URL,
            "AIRFLOW__CELERY__RESULT_BACKEND": "db+" + _db_url(meta_db),
            "AIRFLOW__CELERY__WORKER_CONCURRENCY": str(WORKER_SLOTS),
            "AIRFLOW__CELERY_BROKER_TRANSPORT_OPTIONS__GLOBAL_KEYPREFIX": redis_prefix,
            "AIRFLOW__DAG_PROCESSOR__DAG_BUNDLE_CONFIG_LIST": json.dumps(bundles),
            "AIRFLOW__DAG_PROCESSOR__REFRESH_INTERVAL": "5",
            "AIRFLOW__DAG_PROCESSOR__MIN_FILE_PROCESS_INTERVAL": "15",
            "AIRFLOW__DAG_PROCESSOR__PARSING_PROCESSES": "1",
            "AIRFLOW__SCHEDULER__ENABLE_HEALTH_CHECK": "False",
            "AIRFLOW__LOGGING__WORKER_LOG_SERVER_PORT": str(free_port()),
            "AIRFLOW__LOGGING__TRIGGER_LOG_SERVER_PORT": str(free_port()),
            "AIRFLOW_CONN_METRIC_GATE_DB": _db_url(store_db),
            # Where the asset examples (tests/system/dags/asset_examples.py) write and read their records.
            "METRIC_GATE_SYSTEM_ASSET_RECORDS": str(tmp / "asset_records"),
        }
    )
    return env


def _healthy(api: RestClient) -> bool:
    health = api.get("/api/v2/monitor/health")
    parts = ("metadatabase", "scheduler", "triggerer", "dag_processor")
    return all(health.get(part, {}).get("status") == "healthy" for part in parts)


@pytest.fixture(scope="session")  # module scope restarted it when xdist ran another module in between
def airflow_stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[AirflowStack]:
    """Start the deployment (see the module docstring); stop it and drop its databases afterwards."""
    admin, redis_client = _connect_services()
    tmp = tmp_path_factory.mktemp("airflow_system")
    token = secrets.token_hex(6)
    meta_db, store_db = database_name("sys_meta"), database_name("sys_store")
    redis_prefix = f"metric-gate-system-{token}:"
    processes = _Processes()
    created: list[str] = []
    try:
        for name in (meta_db, store_db):
            with admin.cursor() as cur:
                cur.execute(f'CREATE DATABASE "{name}"')
            created.append(name)
        api_port = free_port()
        env = _airflow_env(tmp, meta_db=meta_db, store_db=store_db, api_port=api_port, redis_prefix=redis_prefix)
        home = Path(env["AIRFLOW_HOME"])
        home.mkdir()
        logs_dir = tmp / "component_logs"
        logs_dir.mkdir()
        stack = AirflowStack(
            tmp=tmp, env=env, api=RestClient(f"http://127.0.0.1:{api_port}"), store_url=_db_url(store_db)
        )

        migrate_log = logs_dir / "db-migrate.log"
        stack.logs["db-migrate"] = migrate_log
        with migrate_log.open("wb") as handle:
            migrate = subprocess.run(
                [str(AIRFLOW_BIN), "db", "migrate"], env=env, cwd=home, stdout=handle, stderr=subprocess.STDOUT,
                timeout=600, check=False,
            )
        if migrate.returncode != 0:
            pytest.fail(f"airflow db migrate failed (exit {migrate.returncode}):\n{stack.tails(80)}")

        commands = {
            "api-server": ["api-server", "--host", "127.0.0.1", "--port", str(api_port), "--workers", "1"],
            "scheduler": ["scheduler"],
            "dag-processor": ["dag-processor"],
            "triggerer": ["triggerer"],
            "celery-worker": ["celery", "worker", "--concurrency", str(WORKER_SLOTS), "--without-mingle"],
        }
        for name in COMPONENTS:
            log = logs_dir / f"{name}.log"
            stack.logs[name] = log
            processes.start(name, [str(AIRFLOW_BIN), *commands[name]], env, log, home)

        def started() -> bool:
            if dead := processes.dead():
                pytest.fail(f"Airflow component(s) exited during start-up: {', '.join(dead)}\n{stack.tails()}")
            return _healthy(stack.api) and "ready." in stack.logs["celery-worker"].read_text(errors="replace")

        try:
            stack.wait_for("every component to report healthy", started, START_TIMEOUT)
            stack.api.token = stack.api.get("/auth/token", expect=(200, 201))["access_token"]
            expected = {"nightly_metric_gate", "two_series_gate", "deferred_record_sensor", "assets_training_job",
                        "assets_metric_gate", "assets_promote_checkpoint"}

            def parsed() -> bool:
                errors = stack.api.get("/api/v2/importErrors")
                if errors["total_entries"]:
                    pytest.fail(f"DAG import errors: {json.dumps(errors['import_errors'])[:4000]}")
                dags = {d["dag_id"] for d in stack.api.get("/api/v2/dags?limit=100")["dags"]}
                return expected <= dags

            stack.wait_for("the DAGs to be parsed", parsed, START_TIMEOUT)
        except BaseException:
            print(f"\nAirflow component logs:\n{stack.tails()}")
            raise
        yield stack
    finally:
        processes.stop()
        try:
            _delete_prefixed(redis_client, redis_prefix)
        finally:
            redis_client.close()
            with admin.cursor() as cur:
                for name in created:
                    cur.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
            admin.close()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo):
    """Attach the tail of every component's log to a failing system test's report."""
    outcome = yield
    report = outcome.get_result()
    stack = getattr(item, "funcargs", {}).get("airflow_stack")
    if report.failed and isinstance(stack, AirflowStack):
        report.sections.append(("Airflow component logs (tails)", stack.tails()))
