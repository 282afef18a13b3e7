"""Shared fixtures: a fresh Postgres database per test session and a store per backend.

Postgres tests use ``METRIC_GATE_TEST_PG_URL`` (default: the local server's ``postgres`` database)
only to create a database of their own, which is dropped at the end of the session.  When the
server cannot be reached those tests are skipped, unless ``METRIC_GATE_REQUIRE_PG=1`` (CI), where
they fail instead.
"""

from __future__ import annotations

import os
import uuid
from urllib.parse import urlsplit, urlunsplit

import pytest
from _test_env import database_name, drop_store_tables, free_port

PG_ADMIN_URL = os.environ.get("METRIC_GATE_TEST_PG_URL", "postgresql://postgres@127.0.0.1:5432/postgres")
REQUIRE_PG = os.environ.get("METRIC_GATE_REQUIRE_PG") == "1"


def _admin_connect():
    import psycopg2

    conn = psycopg2.connect(PG_ADMIN_URL, connect_timeout=5)
    conn.autocommit = True
    return conn


@pytest.fixture(scope="session")
def pg_database_url():
    """URL of a fresh Postgres database for this test session (dropped afterwards)."""
    try:
        admin = _admin_connect()
    except Exception as exc:  # the server is down or unreachable
        message = f"Postgres not reachable at {PG_ADMIN_URL}: {exc}"
        if REQUIRE_PG:
            pytest.fail(message)
        pytest.skip(message)
    name = database_name()
    with admin.cursor() as cur:
        cur.execute(f'CREATE DATABASE "{name}"')
    parts = urlsplit(PG_ADMIN_URL)
    url = urlunsplit((parts.scheme, parts.netloc, f"/{name}", parts.query, parts.fragment))
    try:
        yield url
    finally:
        with admin.cursor() as cur:
            cur.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        admin.close()


def _reset_pg(url: str) -> None:
    drop_store_tables(url)


@pytest.fixture
def pg_url(pg_database_url):
    """A Postgres store URL with no metric-gate tables (they are dropped after each test)."""
    _reset_pg(pg_database_url)
    yield pg_database_url
    _reset_pg(pg_database_url)


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def store_url(request, tmp_path):
    """A fresh, empty store URL, once per backend: the same behavioural test runs on both."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'metric_gate.db'}"
    return request.getfixturevalue("pg_url")


@pytest.fixture
def store(store_url):
    """An open store on a fresh database, once per backend."""
    from airflow_metric_gate.store import open_store

    s = open_store(store_url)
    yield s
    s.close()


_skipped_postgres: list[str] = []


def pytest_runtest_logreport(report):
    if report.skipped and "postgres" in report.keywords:
        _skipped_postgres.append(report.nodeid)


def pytest_sessionfinish(session, exitstatus):
    """Under ``METRIC_GATE_REQUIRE_PG=1`` a skipped Postgres test fails the run."""
    if REQUIRE_PG and _skipped_postgres:
        print(f"\n{len(_skipped_postgres)} Postgres test(s) were skipped but METRIC_GATE_REQUIRE_PG=1:")
        for nodeid in _skipped_postgres[:20]:
            print(f"  {nodeid}")
        session.exitstatus = 1


# -- markers: by folder; ``slow`` and ``benchmark`` where the tests live ---------------------------

#: Folder under tests/ -> the marker every test in it carries.
FOLDER_MARKERS = {"unit": "unit", "integration": "integration", "dags": "dag", "system": "system", "browser": "browser"}
#: Every test of these folders is slow (whole DAG runs, real Airflow components, a browser).  Elsewhere a slow
#: module says so with ``pytestmark`` and a slow test with ``@pytest.mark.slow``.
SLOW_FOLDERS = {"dags", "system", "browser"}
#: These folders start Airflow servers of their own: under ``pytest -n`` their tests share one worker
#: (``--dist loadgroup``), so two deployments never compete for the cores at once.
SERVER_FOLDERS = {"system", "browser"}


@pytest.hookimpl(tryfirst=True)  # before pytest-xdist reads the xdist_group marks
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Mark each test with its folder's marker, ``slow`` in the slow folders (``pytest -m "not slow"``), and
    one ``xdist_group`` for the tests that start Airflow servers."""
    here = os.path.dirname(os.path.abspath(__file__))
    for item in items:
        relative = os.path.relpath(str(item.path), here).split(os.sep)
        folder = relative[0] if len(relative) > 1 else ""
        if folder in FOLDER_MARKERS:
            item.add_marker(FOLDER_MARKERS[folder])
        if folder in SLOW_FOLDERS:
            item.add_marker("slow")
        if folder in SERVER_FOLDERS:
            item.add_marker(pytest.mark.xdist_group("airflow-servers"))


# -- a local S3 server --------------------------------------------------------------------------

S3_CONN_ID = "gate_s3"


class S3Server:
    """A moto S3 server on loopback, with IAM authentication on: wrong keys are refused.

    :param endpoint: ``http://127.0.0.1:<port>``.
    :param access_key: the access key id of the one IAM user allowed everything.
    :param secret_key: its secret.
    """

    region = "us-east-1"

    def __init__(self, endpoint: str, access_key: str, secret_key: str) -> None:
        self.endpoint = endpoint
        self.access_key = access_key
        self.secret_key = secret_key

    def connection(self, *, secret_key: str | None = None) -> str:
        """Return an Airflow ``aws`` connection (JSON, for ``AIRFLOW_CONN_<ID>``) pointing at the server.

        :param secret_key: another secret (for bad-credential tests).
        """
        import json

        return json.dumps(
            {
                "conn_type": "aws",
                "login": self.access_key,
                "password": secret_key or self.secret_key,
                "extra": {"endpoint_url": self.endpoint, "region_name": self.region},
            }
        )

    def env(self, conn_id: str = S3_CONN_ID, *, secret_key: str | None = None) -> dict[str, str]:
        """Return the environment that defines Airflow connection ``conn_id`` for this server.

        :param conn_id: the connection id.
        :param secret_key: another secret (for bad-credential tests).
        """
        return {f"AIRFLOW_CONN_{conn_id.upper()}": self.connection(secret_key=secret_key)}

    def client(self):
        """Return a boto3 S3 client with the good credentials."""
        import boto3

        return boto3.client(
            "s3",
            endpoint_url=self.endpoint,
            aws_access_key_id=self.access_key,
            aws_secret_access_key=self.secret_key,
            region_name=self.region,
        )


@pytest.fixture(scope="session")
def s3_server(tmp_path_factory):
    """Start a moto S3 server on a free loopback port for the session; stop it afterwards."""
    import json
    import subprocess
    import sys
    import time
    import urllib.request

    pytest.importorskip("moto.server", reason="the local S3 server needs moto[server] (the test extra)")
    boto3 = pytest.importorskip("boto3")
    port = free_port()
    endpoint = f"http://127.0.0.1:{port}"
    log = (tmp_path_factory.mktemp("moto") / "server.log").open("wb")
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    process = subprocess.Popen(
        [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
        stdout=log,
        stderr=subprocess.STDOUT,
        env=env,
    )
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                urllib.request.urlopen(f"{endpoint}/moto-api/data.json", timeout=1).close()
                break
            except OSError:
                if process.poll() is not None or time.monotonic() > deadline:
                    pytest.fail(f"the moto S3 server did not start on {endpoint}")
                time.sleep(0.1)
        # One IAM user allowed everything, then authentication on: other keys get 403.
        iam = boto3.client(
            "iam", endpoint_url=endpoint, region_name=S3Server.region,
            aws_access_key_id="bootstrap", aws_secret_access_key="bootstrap",
        )
        iam.create_user(UserName="gate")
        iam.put_user_policy(
            UserName="gate",
            PolicyName="all",
            PolicyDocument=json.dumps(
                {"Version": "2012-10-17", "Statement": [{"Effect": "Allow", "Action": "*", "Resource": "*"}]}
            ),
        )
        key = iam.create_access_key(UserName="gate")["AccessKey"]
        request = urllib.request.Request(f"{endpoint}/moto-api/reset-auth", data=b"0", method="POST",
                                         headers={"Content-Type": "text/plain"})
        urllib.request.urlopen(request, timeout=5).close()
        yield S3Server(endpoint, key["AccessKeyId"], key["SecretAccessKey"])
    finally:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        log.close()


@pytest.fixture(scope="session")
def mlflow_server(tmp_path_factory):
    """An MLflow tracking server on loopback, one per test process, shared by every module that reads
    MLflow runs (each test logs to an experiment of its own)."""
    pytest.importorskip("mlflow")
    from _log_writers import MlflowServer

    server = MlflowServer(tmp_path_factory.mktemp("mlflow")).start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def s3_bucket(s3_server, monkeypatch):
    """A fresh bucket on the local S3 server, and Airflow connection ``gate_s3`` pointing at it.

    Yields the bucket name; the connection is set in this process's environment.
    """

    name = f"gate-{uuid.uuid4().hex[:12]}"
    s3_server.client().create_bucket(Bucket=name)
    for key, value in s3_server.env().items():
        monkeypatch.setenv(key, value)
    for key in [k for k in os.environ if k.startswith("AWS_")]:
        monkeypatch.delenv(key)
    return name
