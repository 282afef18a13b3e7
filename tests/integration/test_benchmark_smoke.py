"""The benchmark runs end to end at smoke scale (figures are checked for presence, never for speed)."""

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
def test_benchmark_smoke_run_writes_every_figure(tmp_path, pg_database_url):
    # pg_database_url: fails (or skips) like every Postgres test when the server is down
    figures, stdout = run_smoke("run.py", tmp_path / "figures.json", "--pg-url", PG_ADMIN_URL)
    for key in ("ingest_vs_parse", "ingest_vs_decoder_parse", "ingest_large_vs_parse",
                "ingest_memory_growth_vs_record_growth", "persist_vs_copy",
                "persist_vs_insert_rows", "evaluate_vs_limit", "evaluate_speedup_vs_per_coordinate",
                "evaluate_growth_120_vs_30", "evaluate_year_vs_limit", "evaluate_year_growth",
                "dag_nightly_vs_noop"):
        assert figures[key] > 0, key
    assert {t["figure"] for t in figures["targets"]} >= {"persist_vs_copy", "evaluate_vs_limit"}
    assert "figure" in stdout and "persist_vs_copy" in stdout


@pytest.mark.postgres
def test_fleet_benchmark_smoke_runs_every_process_count_without_errors(tmp_path, pg_database_url):
    figures, _ = run_smoke("fleet.py", tmp_path / "fleet.json", "--pg-url", PG_ADMIN_URL)
    assert [r["processes"] for r in figures["runs"]] == [1, 2]
    for run in figures["runs"]:
        assert run["errors"] == 0 and run["series_nights"] == figures["series"] * figures["nights"], run
        assert run["values_per_s"] > 0 and len(run["evaluate_median_s_by_night"]) == figures["nights"], run


def run_smoke(script, output, *argv):
    """Run a benchmark script at smoke scale in a process of its own; its figures (from ``output``) and stdout."""
    proc = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / script), "--scale", "smoke", *argv, "--output", str(output)],
        capture_output=True, text=True, cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)}, timeout=900,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return json.loads(output.read_text()), proc.stdout
