"""benchmarks/xcom_sizes.py runs end to end at smoke scale (sizes checked for presence and shape, never time)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.slow, pytest.mark.benchmark]

ROOT = Path(__file__).resolve().parents[2]


def test_xcom_sizes_smoke_run_reports_every_task(tmp_path):
    output = tmp_path / "xcom.json"
    proc = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "xcom_sizes.py"), "--values", "20", "200", "--output", str(output)],
        capture_output=True, text=True, cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)}, timeout=600,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    small, large = json.loads(output.read_text())
    tasks = {"ingest_record", "select_steps", "persist_values", "evaluate_gate"}
    assert set(small["after"]) == set(large["after"]) == tasks
    assert large["before"]["select_steps"] > small["before"]["select_steps"]  # values travelled before
    assert large["after"]["select_steps"] - small["after"]["select_steps"] < 16  # a reference now
    assert large["record_parses_per_night"] == 2
    assert "| `select_steps` |" in proc.stdout
