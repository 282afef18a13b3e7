"""The core never imports Airflow: only the Airflow layer (operators, sensors, triggers, plugins) may.

Each check runs in a fresh interpreter, since this test session itself has long imported Airflow.
"""

from __future__ import annotations

import json
import pkgutil
import subprocess
import sys

import pytest

import airflow_metric_gate

# The Airflow layer: these modules import Airflow by design (example_dags holds a DAG file, task_groups
# builds tasks; hooks/__init__ is Airflow-free, for get_provider_info, but hooks.metric_store is the hook;
# notifications are Airflow notifiers).
AIRFLOW_LAYER = ("hooks", "operators", "sensors", "triggers", "plugins", "example_dags", "task_groups", "notifications")


def core_modules() -> list[str]:
    names = []
    for info in pkgutil.walk_packages(airflow_metric_gate.__path__, prefix="airflow_metric_gate."):
        if info.name.split(".")[1] not in AIRFLOW_LAYER:
            names.append(info.name)
    return sorted(names)


def _loaded_after(statements: str) -> dict:
    probe = (
        f"{statements}\n"
        "import json, sys\n"
        "print(json.dumps(sorted(m for m in sys.modules if m == 'airflow' or m.startswith('airflow.')"
        " or m.startswith('airflow_metric_gate'))))\n"
    )
    proc = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=300, check=False)
    assert proc.returncode == 0, proc.stderr[-4000:]
    loaded = json.loads(proc.stdout.strip().splitlines()[-1])
    return {
        "airflow": [m for m in loaded if m == "airflow" or m.startswith("airflow.")],
        "ours": [m for m in loaded if m.startswith("airflow_metric_gate")],
    }


def test_the_core_module_list_is_complete() -> None:
    modules = core_modules()
    for expected in ("airflow_metric_gate.cli", "airflow_metric_gate.pipeline", "airflow_metric_gate.store.postgres",
                     "airflow_metric_gate.declarations", "airflow_metric_gate.schemas.verdict"):
        assert expected in modules
    assert not [m for m in modules if ".operators" in m or ".plugins" in m]


@pytest.mark.slow
def test_importing_every_core_module_loads_no_airflow() -> None:
    modules = core_modules()
    loaded = _loaded_after("\n".join(f"import {name}" for name in modules))
    assert set(modules) <= set(loaded["ours"])
    assert loaded["airflow"] == [], f"a core module imports Airflow: {loaded['airflow'][:10]}"


@pytest.mark.slow
def test_the_probe_sees_an_airflow_import() -> None:
    """The check above can fail: importing an operator module does load Airflow."""
    loaded = _loaded_after("import airflow_metric_gate.operators.evaluate")
    assert "airflow" in loaded["airflow"]


def test_importing_the_package_loads_nothing_else() -> None:
    """``import airflow_metric_gate`` stays fast: the public API is imported on first use."""
    loaded = _loaded_after("import airflow_metric_gate")
    assert loaded == {"airflow": [], "ours": ["airflow_metric_gate"]}
    loaded = _loaded_after("from airflow_metric_gate import run_gate, Verdict, load_declarations")
    assert loaded["airflow"] == [] and "airflow_metric_gate.api" in loaded["ours"]


def test_every_public_name_resolves() -> None:
    for name in airflow_metric_gate.__all__:
        assert getattr(airflow_metric_gate, name) is not None, name
        assert name in dir(airflow_metric_gate)
    assert airflow_metric_gate.run_gate.__module__ == "airflow_metric_gate.api"
    with pytest.raises(AttributeError, match="no attribute 'run_gates'"):
        airflow_metric_gate.run_gates  # noqa: B018
