"""The benchmark runs end to end at smoke scale (figures are checked for presence, never for speed)."""

from __future__ import annotations

import pytest
from _benchmarks import PG_ADMIN_URL, run_smoke

pytestmark = [pytest.mark.slow, pytest.mark.benchmark]


@pytest.mark.postgres
def test_benchmark_smoke_run_writes_every_figure(tmp_path, pg_database_url):
    # pg_database_url: fails (or skips) like every Postgres test when the server is down
    figures, stdout = run_smoke("run.py", tmp_path / "figures.json", "--pg-url", PG_ADMIN_URL)
    for key in ("ingest_vs_parse", "ingest_vs_decoder_parse", "ingest_large_vs_parse",
                "ingest_memory_growth_vs_record_growth", "persist_vs_copy",
                "persist_vs_insert_rows", "evaluate_vs_limit", "evaluate_speedup_vs_per_coordinate",
                "evaluate_growth_120_vs_30", "evaluate_year_vs_limit", "evaluate_year_growth",
                "evaluate_year_calibrated_vs_limit", "evaluate_year_calibrated_growth", "evaluate_large_vs_limit",
                "evaluate_large_calibrated_vs_limit", "dag_nightly_vs_noop"):
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

