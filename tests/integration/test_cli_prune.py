"""``metric-gate prune``: retention that never removes a night a current baseline uses unless told (issue 19)."""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone

from airflow_metric_gate.cli import EXIT_BAD_INPUT, EXIT_OK, main
from airflow_metric_gate.pipeline import candidate_limit
from airflow_metric_gate.store import RunRow, ValueRow, open_store

COORD = ("m", '"all"', '{"rel_down":0.2,"rel_up":0.2}')
NIGHTS = 30
T0 = datetime(2026, 1, 1, tzinfo=timezone.utc)


def _fill(url, series="s", status="trusted", nights=NIGHTS):
    with open_store(url) as store:
        for n in range(nights):
            run = RunRow(run_id=f"{series}-{n:02d}", series=series, backend="cuda", suite="default", role="baseline",
                         status=status, logical_date=T0 + timedelta(days=n))
            store.write_run(run, [ValueRow(i, *COORD, i, 1.0, i) for i in range(5)])


def _prune(capsys, url, *argv):
    code = main(["prune", "--store", url, "--json", *argv])
    out = capsys.readouterr().out
    return code, json.loads(out) if code == EXIT_OK else None


def _left(url, series="s"):
    with open_store(url) as store:
        return sorted(r.run_id for r in store.list_runs(series=series, limit=1000))


def test_keep_removes_older_nights_with_their_values_but_not_those_a_baseline_uses(capsys, store_url):
    _fill(store_url)
    _fill(store_url, series="other")
    protect = candidate_limit(2)
    code, result = _prune(capsys, store_url, "--keep", "5", "--history-limit", "2", "--series", "s")
    assert code == EXIT_OK
    kept = max(5, protect)
    assert result["nights"] == NIGHTS - kept
    assert result["values"] == 5 * (NIGHTS - kept)
    assert result["kept_for_baselines"] == kept - 5
    assert _left(store_url) == [f"s-{n:02d}" for n in range(NIGHTS - kept, NIGHTS)]
    assert len(_left(store_url, "other")) == NIGHTS  # another series is untouched
    with open_store(store_url) as store:
        assert store.count("metric_values") == 5 * (kept + NIGHTS)
        assert store.run_values(f"s-{NIGHTS - kept - 1:02d}") == []


def test_force_removes_nights_a_baseline_uses_and_dry_run_removes_nothing(capsys, store_url):
    _fill(store_url)
    code, result = _prune(capsys, store_url, "--keep", "3", "--force", "--dry-run")
    assert (code, result["nights"], result["dry_run"]) == (EXIT_OK, NIGHTS - 3, True)
    assert len(_left(store_url)) == NIGHTS
    code, result = _prune(capsys, store_url, "--keep", "3", "--force")
    assert _left(store_url) == ["s-27", "s-28", "s-29"]


def test_before_a_date_and_pending_and_rebaseline_nights(capsys, store_url):
    _fill(store_url, nights=NIGHTS)
    with open_store(store_url) as store:
        store.set_status("s-01", "pending")
        store.mark_rebaseline("s-02")
    code, result = _prune(capsys, store_url, "--before", (T0 + timedelta(days=10)).isoformat(), "--history-limit",
                          "1")
    protect = candidate_limit(1)
    # nights 0..9 are before the date; the newest `protect` judged nights are not among them when protect < 20
    assert protect < NIGHTS - 10
    assert set(_left(store_url)) == {f"s-{n:02d}" for n in range(10, NIGHTS)} | {"s-01", "s-02"}
    assert result["kept_for_baselines"] == 2  # the pending night and the rebaseline marker


def test_the_nights_before_a_recent_marker_are_kept_while_they_bridge_the_new_level(capsys, store_url):
    """A marker five nights ago: the calibrated policy bridges the new level with the nights before it."""
    _fill(store_url)
    with open_store(store_url) as store:
        store.mark_rebaseline("s-25")
    protect = candidate_limit(2)
    code, result = _prune(capsys, store_url, "--keep", "3", "--history-limit", "2")
    assert code == EXIT_OK and protect == 16
    # the 16 most recent judged nights (s-14..s-29), and the 16 before the marker (s-09..s-24)
    assert _left(store_url) == [f"s-{n:02d}" for n in range(9, NIGHTS)]
    assert result["kept_for_baselines"] == 21 - 3 and result["nights"] == 9


def test_prune_without_a_criterion_is_bad_input(capsys, store_url):
    assert main(["prune", "--store", store_url]) == EXIT_BAD_INPUT
    assert "--keep N or --before DATE" in capsys.readouterr().err
