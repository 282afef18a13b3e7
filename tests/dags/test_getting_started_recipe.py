"""docs/getting-started.md's "Run your own DAG locally" recipe, run as written: three nights, the third fails."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.airflow_db

ROOT = Path(__file__).resolve().parents[2]


def _block(text: str, heading: str, language: str) -> str:
    """The first ``language`` code block under ``heading``."""
    section = text.split(heading, 1)[1]
    match = re.search(rf"^```{language}\n(.*?)^```$", section, flags=re.M | re.S)
    assert match, f"no {language} block under {heading}"
    return match.group(1)


def test_the_run_your_own_dag_recipe_works_as_written(tmp_path):
    script = _block((ROOT / "docs" / "getting-started.md").read_text(encoding="utf-8"),
                    "### Run your own DAG locally", "bash")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AIRFLOW", "METRIC_GATE_STORE"))}
    env["PATH"] = os.path.dirname(sys.executable) + os.pathsep + env.get("PATH", "")
    env["TMPDIR"] = str(tmp_path)  # mktemp -d makes the recipe's folder in pytest's temporary folder
    proc = subprocess.run(["bash", "-eu", "-c", script], cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=900, check=False)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    out = proc.stdout
    assert "2026-11-01: passed\n2026-11-02: passed\n2026-11-03: FAILED\n" in out, out
    runs = [line.split() for line in out.splitlines() if "my-training-job" in line]
    assert [(r[0][:10], r[5], r[6]) for r in runs] == [
        ("2026-11-03", "baseline", "untrusted"), ("2026-11-02", "baseline", "trusted"),
        ("2026-11-01", "baseline", "trusted"),
    ]


def test_the_readme_dag_gates_as_baseline_under_airflow_dags_test(tmp_path):
    """The README's shortest DAG, with its two paths pointed at a temporary folder, builds history and fails."""
    code = _block((ROOT / "README.md").read_text(encoding="utf-8"), "one call of the `metric_gate` task group",
                  "python")
    records, dags = tmp_path / "records", tmp_path / "dags"
    dags.mkdir()
    (tmp_path / "gates.yaml").write_text(
        "gates:\n  - metric_key: rollout/raw_reward\n    steps: all\n    constraint: {rel_up: 0.2, rel_down: 0.2}\n")
    assert "/data/training/nightly/" in code and "/data/gates/nightly.yaml" in code
    (dags / "readme_dag.py").write_text(code.replace("/data/training/nightly/", f"{records}/")
                                        .replace("/data/gates/nightly.yaml", str(tmp_path / "gates.yaml")))
    store = tmp_path / "metric_gate.db"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AIRFLOW", "METRIC_GATE_STORE"))}
    env.update({"AIRFLOW_HOME": str(tmp_path / "airflow"), "AIRFLOW__CORE__DAGS_FOLDER": str(dags),
                "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
                "AIRFLOW_CONN_METRIC_GATE_DB": f'{{"conn_type": "sqlite", "host": "{store}"}}'})
    airflow = [sys.executable, "-m", "airflow"]
    subprocess.run([*airflow, "db", "migrate"], env=env, capture_output=True, check=True, timeout=600)
    codes = []
    for day, reward in (("2026-11-01", 0.8), ("2026-11-02", 0.81), ("2026-11-03", 0.4)):
        (records / day).mkdir(parents=True)
        (records / day / "rank0.jsonl").write_text(
            f'{{"metric": "rollout/raw_reward", "series": [[0, {reward}], [1, {reward}]]}}\n')
        (records / day / "_SUCCESS").touch()
        proc = subprocess.run([*airflow, "dags", "test", "rl_finetune_gate", day], env=env, capture_output=True,
                              text=True, timeout=600, check=False)
        codes.append(proc.returncode)
    from airflow_metric_gate.store import open_store

    with open_store(f"sqlite:///{store}") as s:
        runs = sorted(s.list_runs(series="rl-finetune", limit=10), key=lambda r: r.logical_date)
    assert [(r.role, r.status) for r in runs] == [("baseline", "trusted"), ("baseline", "trusted"),
                                                  ("baseline", "untrusted")], proc.stdout[-3000:]
    assert codes[:2] == [0, 0] and codes[2] != 0
