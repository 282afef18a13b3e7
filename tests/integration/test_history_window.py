"""The history window of a run and the earlier runs in it that are still pending (both stores)."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

from airflow_metric_gate.store import RunRow, ValueRow

T0 = datetime(2026, 11, 1, tzinfo=timezone.utc)
COORD = ("rollout/raw_reward", '"all"', '{"rel_up":0.5}')


def _write(store, run_id, day, *, status="trusted", role="baseline", series="s", suite="nightly", **prov):
    run = RunRow(run_id=run_id, series=series, backend="cuda", suite=suite, role=role, status=status,
                 logical_date=T0 + timedelta(days=day), provenance=prov)
    store.write_run(run, [ValueRow(0, *COORD, 0, 1.0, 0)])


def _pending(store, run_id, limit=20):
    return [(r.run_id, r.logical_date.day) for r in store.history_window(run_id, limit).pending]


def test_earlier_pending_baseline_runs_of_the_same_identity_are_found(store):
    _write(store, "n1", 1)
    _write(store, "n2", 2, status="pending", airflow_run_id="backfill__2026-11-03")
    _write(store, "n3", 3, status="pending")
    _write(store, "shadow", 4, status="pending", role="shadow")
    _write(store, "bad", 5, status="untrusted")
    _write(store, "other-series", 5, status="pending", series="t")
    _write(store, "other-suite", 5, status="pending", suite="weekly")
    _write(store, "later", 9, status="pending")
    _write(store, "cur", 6, status="pending")
    window = store.history_window("cur", 20)
    assert _pending(store, "cur") == [("n2", 3), ("n3", 4)]  # oldest first
    assert window.pending[0].airflow_run_id == "backfill__2026-11-03"
    assert [r.run_id for r in window.runs] == ["n3", "n2", "n1"]
    assert window.full is False
    assert _pending(store, "n1") == []
    assert _pending(store, "later") == [("n2", 3), ("n3", 4), ("cur", 7)]


def test_window_is_the_history_limit_most_recent_runs_not_untrusted(store):
    _write(store, "old-pending", 1, status="pending")
    for day in (2, 3, 4):
        _write(store, f"n{day}", day)
    _write(store, "bad", 5, status="untrusted")  # not in the window: does not push old runs out
    _write(store, "cur", 6, status="pending")
    assert _pending(store, "cur", limit=3) == []
    window = store.history_window("cur", 3)
    assert window.full and window.oldest == T0 + timedelta(days=2)
    assert _pending(store, "cur", limit=4) == [("old-pending", 2)]


def test_window_respects_the_rebaseline_marker(store):
    _write(store, "before", 1, status="pending")
    _write(store, "fresh", 2)
    store.mark_rebaseline("fresh")
    _write(store, "cur", 3, status="pending")
    window = store.history_window("cur", 20)
    assert _pending(store, "cur") == []
    assert window.since == T0 + timedelta(days=2)
    assert [r.run_id for r in window.runs] == ["fresh"]


def test_unknown_run_has_an_empty_window(store):
    _write(store, "n1", 1, status="pending")
    window = store.history_window("nope", 20)
    assert window.runs == [] and window.pending == [] and window.found is False
    assert store.history_window("n1", 20).found is True
