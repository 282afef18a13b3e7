"""The memory benchmark runs end to end at smoke scale (figures are checked for presence, never for size)."""

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
def test_memory_benchmark_smoke_run_writes_every_figure(tmp_path, pg_database_url):
    # pg_database_url: fails (or skips) like every Postgres test when the server is down
    output = tmp_path / "memory.json"
    proc = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "memory.py"), "--scale", "smoke", "--pg-url", PG_ADMIN_URL,
         "--output", str(output)],
        capture_output=True, text=True, cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)}, timeout=900,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    figures = json.loads(output.read_text())
    assert set(figures["runs"]) == {"postgres_2000", "postgres_20000", "sqlite_2000", "sqlite_20000"}
    for run in figures["runs"].values():
        for path in ("cli", "operators"):
            assert run[f"{path}_peak_rss_bytes"] > 0
            assert run[f"{path}_night1"]["seconds"] > 0 and run[f"{path}_night2"]["seconds"] > 0
    assert "postgres_cli_growth_bytes_per_point_2000_to_20000" in figures
    assert figures["peak_vs_limit"] > 0 and "figure peak_vs_limit" in proc.stdout
