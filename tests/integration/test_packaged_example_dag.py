"""The example DAG ships inside the package, so ``metric-gate demo`` runs without a source checkout."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
FILES = ("nightly_metric_gate.py", "gates/nightly_metric_gate.yaml")


@pytest.mark.slow
def test_the_repository_dags_folder_gives_the_packaged_dag(tmp_path: Path) -> None:
    """dags/nightly_metric_gate.py defines no DAG of its own: it runs the packaged DAG file."""
    probe = (
        "import json, sys; from airflow.dag_processing.dagbag import DagBag;"
        "from airflow_metric_gate.example_dags import nightly_metric_gate as packaged;"
        "bag = DagBag(sys.argv[1]); assert not bag.import_errors, bag.import_errors;"
        "dag = bag.dags['nightly_metric_gate'];"
        "print(json.dumps({'dags': sorted(bag.dags), 'fileloc': dag.fileloc,"
        " 'same_tasks': dag.task_ids == packaged.dag.task_ids,"
        " 'same_params': dag.params.dump() == packaged.dag.params.dump(),"
        " 'same_doc': dag.doc_md == packaged.dag.doc_md, 'fresh': dag is not packaged.dag}))"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("AIRFLOW__")}
    env["AIRFLOW_HOME"] = str(tmp_path)
    proc = subprocess.run([sys.executable, "-c", probe, str(ROOT / "dags")], env=env, capture_output=True,
                          text=True, timeout=300, check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    seen = json.loads(proc.stdout.splitlines()[-1])
    assert seen == {"dags": ["nightly_metric_gate"], "fileloc": str(ROOT / "dags" / "nightly_metric_gate.py"),
                    "same_tasks": True, "same_params": True, "same_doc": True, "fresh": True}
    # Where relative gates_file paths start (fileloc above), and what the file runs: the packaged DAG.
    shim = (ROOT / "dags" / "nightly_metric_gate.py").read_text()
    assert "DAG(" not in shim and 'with_name("nightly_metric_gate.py")' in shim


def test_the_repository_dags_folder_holds_the_packaged_gates_file_unchanged() -> None:
    """The DAG, seen from dags/, reads its gates file relative to dags/: the same file as the package's."""
    name = "gates/nightly_metric_gate.yaml"
    packaged = ROOT / "airflow_metric_gate" / "example_dags" / name
    assert (ROOT / "dags" / name).read_bytes() == packaged.read_bytes(), (
        f"dags/{name} and airflow_metric_gate/example_dags/{name} differ: change both together"
    )


@pytest.mark.slow
def test_the_wheel_contains_the_example_dag_and_its_gates_file(tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", str(ROOT), "--no-deps", "-q", "-w",
         str(tmp_path)],
        capture_output=True, text=True, timeout=600, check=False, cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    (wheel,) = tmp_path.glob("airflow_metric_gate-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    for name in FILES:
        assert f"airflow_metric_gate/example_dags/{name}" in names


def test_the_demo_finds_the_dag_inside_the_package_from_any_folder(tmp_path: Path) -> None:
    probe = (
        "from airflow_metric_gate.demo import copy_example_dags, find_dags_folder; import sys, airflow_metric_gate;"
        "print(find_dags_folder()); print(airflow_metric_gate.__file__);"
        "print(copy_example_dags(__import__('pathlib').Path(sys.argv[1])))"
    )
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    proc = subprocess.run([sys.executable, "-c", probe, str(tmp_path / "dags")], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    folder, package_init, copied = (Path(line) for line in proc.stdout.splitlines())
    assert folder == Path(package_init).parent / "example_dags"
    assert folder != ROOT / "dags"
    for name in FILES:
        assert (copied / name).read_bytes() == (folder / name).read_bytes()
