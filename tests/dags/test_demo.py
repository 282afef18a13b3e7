"""``metric-gate demo`` (the README's first command) runs the nightly DAG through Airflow to its end."""

from __future__ import annotations

import subprocess
import sys

import pytest

pytestmark = pytest.mark.airflow_db


def test_demo_builds_history_then_fails_the_regressed_night(tmp_path):
    proc = subprocess.run(
        [sys.executable, "-m", "airflow_metric_gate.cli", "demo", "--nights", "2", "--workdir", str(tmp_path)],
        capture_output=True, text=True, timeout=900, check=False,
    )
    out = proc.stdout
    assert proc.returncode == 0, out[-4000:] + proc.stderr[-4000:]
    assert out.count("DAG run succeeded") == 2 and out.count("DAG run FAILED") == 1
    assert "NOT-TRUSTED" in out
    assert "FAIL    rollout/raw_reward" in out  # the failing coordinate is shown
    assert "3 nights stored" in out
    assert (tmp_path / "metric_gate.db").exists()
    assert f"metric-gate history rollout/raw_reward --series demo-rl --store sqlite:///{tmp_path}" in out
    assert "TRUSTED (121 results, 0 fail, 0 error)\n" in out  # the per-night summary line, nothing after it
