"""The UI reads benchmark runs end to end at smoke scale (figures checked for presence, never for speed)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.slow, pytest.mark.benchmark]

ROOT = Path(__file__).resolve().parents[2]
PG_ADMIN_URL = os.environ.get("METRIC_GATE_TEST_PG_URL", "postgresql://postgres@127.0.0.1:5432/postgres")


@pytest.mark.postgres
def test_ui_reads_benchmark_smoke_run_writes_every_figure(tmp_path, pg_database_url):
    # pg_database_url: fails (or skips) like every Postgres test when the server is down
    output = tmp_path / "ui_reads.json"
    proc = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "ui_reads.py"), "--scale", "smoke", "--pg-url", PG_ADMIN_URL,
         "--output", str(output)],
        capture_output=True, text=True, cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)}, timeout=600,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    figures = json.loads(output.read_text())
    for key in ("chart_365_vs_pk_lookup", "runs_page_vs_pk_lookup", "runs_last_page_vs_pk_lookup",
                "steps_chart_vs_pk_lookup", "whole_run_vs_pk_lookup"):
        assert figures[key] > 0, key
    assert any("metric_points" in node for node in figures["chart_365_plan"])
    assert "chart_365_vs_pk_lookup" in proc.stdout
