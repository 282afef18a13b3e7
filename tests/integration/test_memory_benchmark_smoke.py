"""The memory benchmark runs end to end at smoke scale (figures are checked for presence, never for size)."""

from __future__ import annotations

import pytest
from _benchmarks import PG_ADMIN_URL, run_smoke

pytestmark = [pytest.mark.slow, pytest.mark.benchmark]


@pytest.mark.postgres
def test_memory_benchmark_smoke_run_writes_every_figure(tmp_path, pg_database_url):
    # pg_database_url: fails (or skips) like every Postgres test when the server is down
    figures, stdout = run_smoke("memory.py", tmp_path / "memory.json", "--pg-url", PG_ADMIN_URL)
    assert set(figures["runs"]) == {"postgres_2000", "postgres_20000", "sqlite_2000", "sqlite_20000"}
    for run in figures["runs"].values():
        for path in ("cli", "operators"):
            assert run[f"{path}_peak_rss_bytes"] > 0
            assert run[f"{path}_night1"]["seconds"] > 0 and run[f"{path}_night2"]["seconds"] > 0
    assert "postgres_cli_growth_bytes_per_point_2000_to_20000" in figures
    assert figures["peak_vs_limit"] > 0 and "figure peak_vs_limit" in stdout
