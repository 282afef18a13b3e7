"""A real Airflow api-server with the "Metric gate" plugin, on a throwaway Airflow home, for browser tests.

The ``ui_server`` fixture (module scope):

1. creates an ``AIRFLOW_HOME`` with a SQLite metadata database (``airflow db migrate``), the
   repository's ``dags/`` as the DAG bundle, and the metric store in the test session's Postgres
   database behind the ``metric_gate_db`` connection;
2. runs the nightly DAG (``dags/nightly_metric_gate.py``) for five good nights and one regressed
   night with ``dag.test()`` (through ``tests/dags/_dag_runner.py``, in a child process), so the
   evaluate task instances, their verdict XComs and the store's runs are all real;
3. starts ``airflow api-server`` with the simple auth manager extended by
   :mod:`scoped_auth_manager`: users ``admin`` (admin), ``viewer`` (viewer: reads every DAG,
   edits none) and ``outsider`` (viewer, but refused every DAG);
4. stops the api-server (its process group, which this fixture started) at the end.

Nothing here changes the pytest process's own environment or imports Airflow.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from _test_env import drop_store_tables, free_port

REPO_ROOT = Path(__file__).resolve().parents[2]
RUNNER = REPO_ROOT / "tests" / "dags" / "_dag_runner.py"
RESULT_PREFIX = "@@metric-gate-dag-result@@ "
AIRFLOW_BIN = Path(sys.executable).with_name("airflow")
CHROMIUM = Path("/usr/bin/chromium")
DAG_ID = "nightly_metric_gate"
SERIES = "rl-ui"
BACKEND = "cuda"
SUITE = "nightly-8xh100"
GOOD_NIGHTS = ("2026-11-01", "2026-11-02", "2026-11-03", "2026-11-04", "2026-11-05")
BAD_NIGHT = "2026-11-06"
USERS = {"admin": "admin", "viewer": "viewer", "outsider": "viewer"}
PASSWORDS = {"admin": "admin-pass-1", "viewer": "viewer-pass-1", "outsider": "outsider-pass-1"}
GOOD = {"train/grad_norm": 1.0, "train/ppo_kl": 0.05, "rollout/raw_reward": 0.8}


def _write_night(root: Path, day: str, *, reward: float, wobble: float) -> None:
    night = root / day
    night.mkdir(parents=True)
    values = {**GOOD, "rollout/raw_reward": reward, "train/grad_norm": 1.0 + wobble}
    for rank in range(2):
        steps = range(rank, 4, 2)
        lines = [{"metric": m, "series": [[s, v + 0.002 * s] for s in steps]} for m, v in values.items()]
        lines.append({"metric": "rollout/tito_session_mismatch_rate/v1/assistant_text", "series": [[3, 0.01]]})
        (night / f"rank{rank}.jsonl").write_text("".join(json.dumps(line) + "\n" for line in lines))
    (night / "_SUCCESS").touch()


@dataclass
class UiServer:
    """The running api-server and what the test data holds.

    :param url: the api-server's root URL (no trailing slash).
    :param env: the environment its processes run with.
    :param bad_run_id: the Airflow run id of the regressed night.
    :param bad_verdict: that night's verdict XCom.
    :param store_url: the metric store's URL.
    """

    url: str
    env: dict[str, str]
    bad_run_id: str
    bad_verdict: dict[str, Any]
    store_url: str
    nights: int = field(default=len(GOOD_NIGHTS) + 1)

    def token(self, user: str) -> str:
        """Return a JWT for ``user`` from the api-server's ``POST /auth/token``.

        :param user: the user name.
        """
        body = json.dumps({"username": user, "password": PASSWORDS[user]}).encode()
        request = urllib.request.Request(
            f"{self.url}/auth/token", data=body, headers={"Content-Type": "application/json"}, method="POST"
        )
        with urllib.request.urlopen(request, timeout=30) as response:
            return json.loads(response.read())["access_token"]

    def request(self, path: str, *, token: str | None = None, data: bytes | None = None) -> tuple[int, str]:
        """Return ``(status, body)`` of a request to the api-server (no redirect followed).

        :param path: the path, starting with ``/``.
        :param token: a JWT sent as ``Authorization: Bearer``.
        :param data: a form body (makes it a POST).
        """
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        if data is not None:
            headers["Content-Type"] = "application/x-www-form-urlencoded"

        class NoRedirect(urllib.request.HTTPRedirectHandler):
            def redirect_request(self, *args: Any, **kwargs: Any) -> None:
                return None

        opener = urllib.request.build_opener(NoRedirect)
        request = urllib.request.Request(f"{self.url}{path}", data=data, headers=headers)
        try:
            with opener.open(request, timeout=60) as response:
                return response.status, response.read().decode()
        except urllib.error.HTTPError as err:
            return err.code, err.read().decode()


def _run(args: list[str], env: dict[str, str], cwd: Path, timeout: float) -> subprocess.CompletedProcess[str]:
    return subprocess.run(args, env=env, cwd=cwd, capture_output=True, text=True, timeout=timeout)


@pytest.fixture(scope="session")  # one api-server, however xdist orders the tests
def ui_server(tmp_path_factory: pytest.TempPathFactory, pg_database_url: str) -> UiServer:
    """A running api-server with the plugin, over real DAG runs (see the module docstring)."""
    if not CHROMIUM.exists():
        message = f"{CHROMIUM} is missing (.ci/run installs Debian's chromium)"
        if os.environ.get("METRIC_GATE_REQUIRE_BROWSER") == "1":
            pytest.fail(message)
        pytest.skip(message)
    home = tmp_path_factory.mktemp("ui_airflow_home")
    records = tmp_path_factory.mktemp("ui_records")
    for i, day in enumerate(GOOD_NIGHTS):
        _write_night(records, day, reward=0.8 + 0.01 * (i % 3), wobble=0.01 * (i % 2))
    _write_night(records, BAD_NIGHT, reward=0.4, wobble=0.0)  # raw_reward halves: below the band
    (home / "passwords.json").write_text(json.dumps(PASSWORDS))

    drop_store_tables(pg_database_url)

    port = free_port()
    bundles = [{"name": "dags-folder", "classpath": "airflow.dag_processing.bundles.local.LocalDagBundle",
                "kwargs": {}}]
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AIRFLOW__", "AIRFLOW_CONN_", "AIRFLOW_VAR_"))}
    env.update({
        "AIRFLOW_HOME": str(home),
        "AIRFLOW__CORE__DAGS_FOLDER": str(REPO_ROOT / "dags"),
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
        "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": f"sqlite:///{home / 'airflow.db'}",
        "AIRFLOW__DAG_PROCESSOR__DAG_BUNDLE_CONFIG_LIST": json.dumps(bundles),
        "AIRFLOW__CORE__AUTH_MANAGER": "scoped_auth_manager.DagScopedAuthManager",
        "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS": ",".join(f"{u}:{r}" for u, r in USERS.items()),
        "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE": str(home / "passwords.json"),
        "AIRFLOW__API_AUTH__JWT_SECRET": "metric-gate-ui-test-jwt-secret-0123456789abcdef",
        "AIRFLOW__API__SECRET_KEY": "metric-gate-ui-test-secret",
        "AIRFLOW__API__BASE_URL": f"http://127.0.0.1:{port}",
        "AIRFLOW__API__WORKERS": "1",
        "AIRFLOW_CONN_METRIC_GATE_DB": pg_database_url,
        "METRIC_GATE_TEST_DAGLESS_USERS": "outsider",
        "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO_ROOT / "tests" / "browser"), str(REPO_ROOT),
                                                    os.environ.get("PYTHONPATH")])),
    })
    migrate = _run([str(AIRFLOW_BIN), "db", "migrate"], env, home, 900)
    assert migrate.returncode == 0, migrate.stdout[-4000:] + migrate.stderr[-4000:]

    conf = {"record_root": str(records), "series": SERIES, "backend": BACKEND, "suite": SUITE, "role": "baseline"}
    runs = [{"dag_file": str(REPO_ROOT / "dags" / f"{DAG_ID}.py"), "dag_id": DAG_ID, "conf": conf,
             "logical_date": f"{day}T00:00:00+00:00"} for day in (*GOOD_NIGHTS, BAD_NIGHT)]
    proc = _run([sys.executable, str(RUNNER), "test", json.dumps({"runs": runs})], env, home, 900)
    reports = [json.loads(line[len(RESULT_PREFIX):]) for line in proc.stdout.splitlines()
               if line.startswith(RESULT_PREFIX)]
    assert proc.returncode == 0 and len(reports) == len(runs), proc.stdout[-6000:] + proc.stderr[-3000:]
    bad = reports[-1]
    assert bad["tasks"]["metric_gate.evaluate_gate"]["state"] == "failed", bad

    log = (home / "api-server.log").open("w")
    server = subprocess.Popen(
        [str(AIRFLOW_BIN), "api-server", "--host", "127.0.0.1", "--port", str(port)],
        env=env, cwd=home, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 180
        while True:
            try:
                with urllib.request.urlopen(f"{url}/api/v2/monitor/health", timeout=5):
                    break
            except (urllib.error.URLError, ConnectionError, OSError):
                if server.poll() is not None or time.monotonic() > deadline:
                    pytest.fail("api-server did not start:\n" + (home / "api-server.log").read_text()[-6000:])
                time.sleep(1)
        yield UiServer(url=url, env=env, bad_run_id=bad["run_id"], bad_verdict=bad["xcom"]["metric_gate.evaluate_gate"],
                       store_url=pg_database_url)
    finally:
        try:
            os.killpg(server.pid, signal.SIGTERM)
            server.wait(30)
        except (ProcessLookupError, subprocess.TimeoutExpired):
            os.killpg(server.pid, signal.SIGKILL)
            server.wait(10)
        log.close()
        if os.environ.get("METRIC_GATE_KEEP_UI_LOG"):
            shutil.copy(home / "api-server.log", os.environ["METRIC_GATE_KEEP_UI_LOG"])
