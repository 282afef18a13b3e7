"""The Docker Compose deployment, checked without a Docker engine.

The compose file must parse, reference files that exist in the repository, and agree with the
package: the store connection id, the console script and provider entry point it calls, and the
DAG folder it mounts.
"""

from __future__ import annotations

import os
import re
import shlex
from pathlib import Path
from urllib.parse import urlsplit

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
DOCKER = ROOT / "docker"
COMPOSE_FILE = DOCKER / "docker-compose.yml"
DAGS_IN_CONTAINER = "/opt/airflow/dags"
AIRFLOW_SERVICES = ("airflow-api-server", "airflow-scheduler", "airflow-dag-processor", "airflow-triggerer")
ONE_SHOT = "airflow-init"


@pytest.fixture(scope="module")
def compose() -> dict:
    return yaml.safe_load(COMPOSE_FILE.read_text(encoding="utf-8"))


@pytest.fixture(scope="module")
def services(compose: dict) -> dict:
    return compose["services"]


def _env(service: dict) -> dict[str, str]:
    env = service.get("environment") or {}
    if isinstance(env, list):
        env = dict(item.split("=", 1) for item in env)
    return {k: str(v) for k, v in env.items()}


def _interpolate(value: str) -> str:
    """Fill ``${VAR}``, ``${VAR:-default}`` and ``${VAR:?message}`` with placeholders or defaults."""

    def fill(match: re.Match) -> str:
        name, op, arg = match.group(1), match.group(2), match.group(3)
        return arg if op == ":-" else f"<{name}>"

    return re.sub(r"(?<!\$)\$\{(\w+)(?:(:-|:\?)([^}]*))?\}", fill, value)


def _volumes(service: dict) -> list[tuple[str, str]]:
    pairs = []
    for volume in service.get("volumes", []):
        if isinstance(volume, dict):
            pairs.append((volume["source"], volume["target"]))
        else:
            source, target = volume.split(":")[:2]
            pairs.append((source, target))
    return pairs


def _conn_id() -> str:
    from airflow_metric_gate import get_provider_info

    return get_provider_info()["config"]["metric_gate"]["options"]["conn_id"]["default"]


def test_compose_file_has_the_stack(services: dict) -> None:
    assert {"postgres", ONE_SHOT, *AIRFLOW_SERVICES} <= set(services)
    commands = {name: services[name].get("command") for name in AIRFLOW_SERVICES}
    assert commands == {
        "airflow-api-server": "api-server",
        "airflow-scheduler": "scheduler",
        "airflow-dag-processor": "dag-processor",
        "airflow-triggerer": "triggerer",
    }


def test_every_referenced_path_exists(compose: dict, services: dict) -> None:
    built = 0
    for name, service in services.items():
        build = service.get("build")
        if build is not None:
            if isinstance(build, str):
                build = {"context": build}
            context = (DOCKER / build.get("context", ".")).resolve()
            assert context.is_dir(), f"{name}: build context {context} does not exist"
            dockerfile = context / build.get("dockerfile", "Dockerfile")
            assert dockerfile.is_file(), f"{name}: Dockerfile {dockerfile} does not exist"
            built += 1
        for source, _ in _volumes(service):
            if source.startswith((".", "/")):
                assert (DOCKER / source).resolve().exists(), f"{name}: mounted path {source} does not exist"
            else:
                assert source in (compose.get("volumes") or {}), f"{name}: volume {source} is not declared"
    assert built >= len(AIRFLOW_SERVICES)


def test_airflow_services_are_built_from_the_package(services: dict) -> None:
    for name in (ONE_SHOT, *AIRFLOW_SERVICES):
        build = services[name]["build"]
        assert (DOCKER / build["context"]).resolve() == ROOT, f"{name}: build context is not the repository"
        assert (ROOT / build["dockerfile"]).resolve() == DOCKER / "Dockerfile"


def _dockerfile_copies() -> tuple[str, list[tuple[list[str], str]], str]:
    text = (DOCKER / "Dockerfile").read_text(encoding="utf-8")
    text = re.sub(r"\\\n", " ", text)
    args = dict(re.findall(r"^ARG (\w+)=(\S+)$", text, flags=re.M))
    base = re.search(r"^FROM (\S+)", text, flags=re.M).group(1)
    base = re.sub(r"\$\{(\w+)\}", lambda m: args[m.group(1)], base)
    copies = []
    for line in re.findall(r"^COPY (.+)$", text, flags=re.M):
        words = [w for w in shlex.split(line) if not w.startswith("--")]
        copies.append((words[:-1], words[-1]))
    runs = "\n".join(re.findall(r"^RUN (.+)$", text, flags=re.M))
    return base, copies, runs


def test_dockerfile_installs_the_package_on_airflow_3() -> None:
    base, copies, runs = _dockerfile_copies()
    assert re.fullmatch(r"apache/airflow:3\.\d+\.\d+-python3\.11", base), base
    copied = {}
    for sources, target in copies:
        for source in sources:
            assert (ROOT / source).exists(), f"Dockerfile copies {source}, which does not exist"
            copied[source] = target
    assert "pyproject.toml" in copied and "airflow_metric_gate" in copied
    install_dir = copied["pyproject.toml"].rstrip("/")
    assert copied["airflow_metric_gate"].rstrip("/") == f"{install_dir}/airflow_metric_gate"
    installs = re.search(rf"pip install [^\n]*{re.escape(install_dir)}(\s|$)", runs)
    assert installs, "the Dockerfile does not pip install the copied package"
    # Everything pyproject.toml needs to build is copied (its readme, too).
    readme = re.search(r'^readme = "([^"]+)"', (ROOT / "pyproject.toml").read_text(), flags=re.M)
    if readme:
        assert readme.group(1) in copied


def test_dockerignore_keeps_what_the_dockerfile_copies() -> None:
    ignore = DOCKER / "Dockerfile.dockerignore"
    if not ignore.exists():
        pytest.skip("no Dockerfile.dockerignore")
    lines = [line.strip() for line in ignore.read_text().splitlines()]
    rules = [line for line in lines if line and not line.startswith("#")]
    _, copies, _ = _dockerfile_copies()
    for sources, _target in copies:
        for source in sources:
            if "*" in rules:
                kept = f"!{source}" in rules or f"!{source}/" in rules
                assert kept, f"{source} is excluded from the build context"


def test_store_connection_matches_the_operators_default(services: dict) -> None:
    from airflow_metric_gate.hooks.metric_store import DEFAULT_CONN_ID
    from airflow_metric_gate.store import STORE_URL_ENV

    conn_id = _conn_id()
    assert conn_id == DEFAULT_CONN_ID == "metric_gate_db"
    variable = f"AIRFLOW_CONN_{conn_id.upper()}"
    for name in (ONE_SHOT, *AIRFLOW_SERVICES):
        env = _env(services[name])
        assert variable in env, f"{name}: {variable} is not set"
        conn = urlsplit(_interpolate(env[variable]))
        assert conn.scheme in ("postgres", "postgresql"), f"{name}: the store connection is not postgres"
        assert conn.hostname == "postgres", f"{name}: the store connection is not the postgres service"
        # The command line inside the containers reaches the same database.
        cli = urlsplit(_interpolate(env[STORE_URL_ENV]))
        same = ("hostname", "port", "path", "username")
        assert [getattr(cli, a) for a in same] == [getattr(conn, a) for a in same], name


def test_databases_are_the_ones_the_init_script_creates(services: dict) -> None:
    init_dir = next(
        (DOCKER / source).resolve()
        for source, target in _volumes(services["postgres"])
        if target == "/docker-entrypoint-initdb.d"
    )
    scripts = sorted(p for p in init_dir.iterdir() if p.suffix in (".sh", ".sql"))
    assert scripts, "no init script for the postgres service"
    created = set()
    for script in scripts:
        if script.suffix == ".sh":
            assert os.access(script, os.X_OK), f"{script.name} must be executable"
        created |= set(re.findall(r"CREATE DATABASE (\w+)", script.read_text()))
    env = _env(services["airflow-scheduler"])
    metadata = urlsplit(_interpolate(env["AIRFLOW__DATABASE__SQL_ALCHEMY_CONN"]))
    store = urlsplit(_interpolate(env[f"AIRFLOW_CONN_{_conn_id().upper()}"]))
    assert metadata.hostname == "postgres"
    assert {metadata.path.lstrip("/"), store.path.lstrip("/")} <= created
    assert metadata.path != store.path, "the metric store and Airflow's metadata share one database"


def test_dags_folder_is_mounted(services: dict) -> None:
    for name in AIRFLOW_SERVICES:
        mounts = {target: source for source, target in _volumes(services[name])}
        assert DAGS_IN_CONTAINER in mounts, f"{name}: dags/ is not mounted"
        dags = (DOCKER / mounts[DAGS_IN_CONTAINER]).resolve()
        assert dags == ROOT / "dags"
        dag_file = dags / "nightly_metric_gate.py"
        assert dag_file.is_file()
        # The gates file the DAG reads by default (relative to dags/, which imports the packaged DAG)
        # travels with the mount.
        packaged = ROOT / "airflow_metric_gate" / "example_dags" / dag_file.name
        found = re.findall(r'"(gates/[\w./-]+\.(?:ya?ml|json|py))"', packaged.read_text())
        assert found, f"no default gates file found in {packaged.name}"
        for gates in found:
            assert (dags / gates).is_file(), f"the DAG's gates file {gates} is not in dags/"


def test_init_runs_commands_the_package_provides(services: dict) -> None:
    tomllib = pytest.importorskip("tomllib")
    from airflow_metric_gate.cli import build_parser

    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    command = services[ONE_SHOT]["command"]
    script = command if isinstance(command, str) else " ".join(command)
    calls = re.findall(r"^\s*metric-gate (.+)$", script, flags=re.M)
    assert calls, "airflow-init does not create the store schema"
    assert "metric-gate" in project["scripts"]
    for call in calls:
        build_parser().parse_args(shlex.split(call))  # a usage error exits
    assert any(shlex.split(c)[:2] == ["db", "upgrade"] for c in calls)
    assert "airflow db migrate" in script
    provider = re.search(r"airflow providers list \| grep -q (\S+)", script)
    assert provider and provider.group(1) == project["name"]
    assert "apache_airflow_provider" in project["entry-points"]


def test_every_long_running_service_has_a_healthcheck(services: dict) -> None:
    for name, service in services.items():
        if name == ONE_SHOT:
            assert service.get("restart") == "no" and "healthcheck" not in service
            continue
        check = service.get("healthcheck")
        assert check and check.get("test"), f"{name}: no health check"
        assert service.get("restart") in ("always", "unless-stopped"), f"{name}: not restarted"
    for name in AIRFLOW_SERVICES:
        depends = services[name]["depends_on"]
        assert depends[ONE_SHOT]["condition"] == "service_completed_successfully"
        assert depends["postgres"]["condition"] == "service_healthy"
    scheduler_env = _env(services["airflow-scheduler"])
    if ":8974/" in str(services["airflow-scheduler"]["healthcheck"]["test"]):
        assert scheduler_env.get("AIRFLOW__SCHEDULER__ENABLE_HEALTH_CHECK") == "true"


def test_execution_api_points_at_the_api_server(services: dict) -> None:
    url = urlsplit(_env(services["airflow-scheduler"])["AIRFLOW__CORE__EXECUTION_API_SERVER_URL"])
    assert url.hostname == "airflow-api-server" and url.hostname in services


def test_env_example_defines_every_variable_the_compose_file_reads() -> None:
    text = COMPOSE_FILE.read_text(encoding="utf-8")
    required = set(re.findall(r"(?<!\$)\$\{(\w+)", text))  # ``$${...}`` is a literal ``$`` for the shell
    example = (DOCKER / ".env.example").read_text(encoding="utf-8")
    defined = set(re.findall(r"^(\w+)=", example, flags=re.M))
    assert required, "the compose file takes no settings from the environment"
    assert not required - defined, f".env.example lacks {sorted(required - defined)}"
