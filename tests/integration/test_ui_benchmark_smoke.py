"""The UI reads benchmark runs end to end at smoke scale (figures checked for presence, never for speed)."""

from __future__ import annotations

import pytest
from _benchmarks import PG_ADMIN_URL, run_smoke

pytestmark = [pytest.mark.slow, pytest.mark.benchmark]


@pytest.mark.postgres
def test_ui_reads_benchmark_smoke_run_writes_every_figure(tmp_path, pg_database_url):
    # pg_database_url: fails (or skips) like every Postgres test when the server is down
    figures, stdout = run_smoke("ui_reads.py", tmp_path / "ui_reads.json", "--pg-url", PG_ADMIN_URL, timeout=600)
    for key in ("chart_365_vs_pk_lookup", "runs_page_vs_pk_lookup", "runs_last_page_vs_pk_lookup",
                "steps_chart_vs_pk_lookup", "whole_run_vs_pk_lookup"):
        assert figures[key] > 0, key
    assert any("metric_points" in node for node in figures["chart_365_plan"])
    assert "chart_365_vs_pk_lookup" in stdout
