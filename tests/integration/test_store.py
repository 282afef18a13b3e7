"""The store on both backends: schema, atomic idempotent writes, baselines, marking (SPEC 7)."""

from __future__ import annotations

import math
from datetime import datetime, timedelta, timezone

import pytest

from airflow_metric_gate.store import RunRow, StoreInputError, ValueRow, open_store
from airflow_metric_gate.store.schema import SCHEMA_VERSION

T0 = datetime(2026, 11, 1, tzinfo=timezone.utc)
COORD = ("rollout/raw_reward", '"all"', '{"rel_up":0.5}')


def _run(run_id, day, *, role="baseline", status="trusted", series="s", **prov):
    return RunRow(run_id=run_id, series=series, backend="cuda", suite="nightly", role=role, status=status,
                  logical_date=T0 + timedelta(days=day), provenance=prov)


def _values(*values, coord=COORD):
    return [ValueRow(i, *coord, i, v, i) for i, v in enumerate(values)]


def test_schema_created_on_first_use_and_versioned(store):
    assert store.schema_version() == 0
    assert store.count("runs") == 0  # first use creates the schema
    assert store.schema_version() == SCHEMA_VERSION
    assert store.upgrade() == (SCHEMA_VERSION, SCHEMA_VERSION)


def test_public_tables_and_columns(store, store_url):
    store.write_run(_run("r1", 0), _values(0.5))
    with store._transaction() as cur:
        store._execute(cur, "SELECT run_id, series, backend, suite, role, status, logical_date, created_at, "
                            "dag_id, airflow_run_id, try_number, commit_sha, training_job_id FROM runs")
        assert len(cur.fetchall()) == 1
        store._execute(cur, "SELECT run_id, metric_key, steps_key, constraint_key, step, value FROM metric_values")
        assert cur.fetchall() == [("r1", *COORD, 0, 0.5)]


def test_rewriting_a_run_replaces_its_rows(store):
    assert store.write_run(_run("r1", 0), _values(0.1, 0.2, 0.3)) == 3
    assert store.write_run(_run("r1", 0), _values(0.4, 0.5)) == 2
    assert store.count("runs") == 1
    assert store.count("metric_values") == 2
    current, _ = store.run_values_and_baselines("r1", 20)
    assert [v.value for v in current] == [0.4, 0.5]


def test_non_finite_value_is_refused_before_any_statement(store):
    store.write_run(_run("r1", 0), _values(0.1, 0.2))
    for bad in (math.nan, math.inf, -math.inf):
        with pytest.raises(StoreInputError, match="non-finite"):
            store.write_run(_run("r1", 0), _values(0.3, bad))
    current, _ = store.run_values_and_baselines("r1", 20)
    assert [v.value for v in current] == [0.1, 0.2]  # nothing lost, nothing half-written


def test_a_night_with_two_values_for_one_coordinate_is_refused_by_name_before_it_is_sent(store):
    store.write_run(_run("r1", 0), _values(0.1, 0.2))
    duplicate = [ValueRow(0, *COORD, 0, 0.9, 0), ValueRow(1, *COORD, 1, 0.7, 1), ValueRow(2, *COORD, 0, 0.8, 0)]
    with pytest.raises(StoreInputError, match=r"two values of rollout/raw_reward step 0 \(steps \"all\", "
                                              r"constraint \{\"rel_up\":0.5\}\) in one night.*nothing was written"):
        store.write_run(_run("r1", 0), duplicate)
    current, _ = store.run_values_and_baselines("r1", 20)
    assert [v.value for v in current] == [0.1, 0.2]
    assert store.get_run("r1").status == "trusted"


def test_failed_write_rolls_back_the_whole_run(store):
    """The repeat is in the third chunk: two chunks were sent when the write is refused, and none of it stays."""
    store.write_run(_run("r1", 0), _values(0.1, 0.2))
    duplicate = [ValueRow(0, *COORD, 0, 0.9, 0), ValueRow(1, *COORD, 1, 0.7, 1), ValueRow(2, *COORD, 0, 0.8, 0)]
    with pytest.raises(StoreInputError, match="two values of rollout/raw_reward step 0 .*nothing was written"):
        store.write_night(_run("r1", 0), duplicate, chunk=1)
    current, _ = store.run_values_and_baselines("r1", 20)
    assert [v.value for v in current] == [0.1, 0.2]
    assert store.count("metric_values") == 2
    assert store.get_run("r1").status == "trusted"


def test_baselines_come_from_earlier_trusted_baseline_runs_only(store):
    store.write_run(_run("old", 0), _values(1.0))
    store.write_run(_run("shadow", 1, role="shadow"), _values(100.0))
    store.write_run(_run("bad", 2, status="untrusted"), _values(200.0))
    store.write_run(_run("pending", 3, status="pending"), _values(300.0))
    store.write_run(_run("other-series", 4, series="t"), _values(400.0))
    store.write_run(_run("future", 9), _values(500.0))
    store.write_run(_run("cur", 5, status="pending"), _values(2.0))
    current, history = store.run_values_and_baselines("cur", 20)
    assert [v.value for v in current] == [2.0]
    assert history == {0: [1.0]}


def test_history_limit_takes_most_recent_runs(store):
    for day in range(25):
        store.write_run(_run(f"r{day:02d}", day), _values(float(day)))
    store.write_run(_run("cur", 30, status="pending"), _values(0.0))
    _, history = store.run_values_and_baselines("cur", 20)
    assert sorted(history[0]) == [float(d) for d in range(5, 25)]
    _, history = store.run_values_and_baselines("cur", 3)
    assert sorted(history[0]) == [22.0, 23.0, 24.0]


def test_current_run_is_never_its_own_baseline(store):
    store.write_run(_run("cur", 5), _values(7.0))  # even when trusted and a baseline
    _, history = store.run_values_and_baselines("cur", 20)
    assert history == {}


def test_baselines_match_coordinate_exactly(store):
    other_constraint = ("rollout/raw_reward", '"all"', '{"rel_up":0.5,"rel_down":0.1}')
    store.write_run(_run("old", 0), _values(1.0) + [ValueRow(1, *other_constraint, 0, 50.0, 0)])
    store.write_run(_run("cur", 1, status="pending"),
                    _values(1.0, 1.5) + [ValueRow(2, *other_constraint, 0, 51.0, 0)])
    _, history = store.run_values_and_baselines("cur", 20)
    assert history == {0: [1.0], 2: [50.0]}  # step 1 is new: no history


def test_mark_untrusted_and_trusted_are_idempotent(store):
    store.write_run(_run("r1", 0, commit_sha="abc", airflow_run_id="scheduled__x", dag_id="d"), _values(1.0))
    store.write_run(_run("r2", 1, commit_sha="abc"), _values(1.0))
    assert store.mark("untrusted", by="commit", key="abc") == 2
    assert store.mark("untrusted", by="commit", key="abc") == 0
    assert store.mark("trusted", by="airflow_run_id", key="scheduled__x", dag_id="d") == 1
    assert store.mark("trusted", by="run_id", key="r1") == 0
    assert store.get_run("r1").status == "trusted"
    assert store.get_run("r2").status == "untrusted"


def test_rebaseline_marker_drops_older_history(store):
    store.write_run(_run("a", 0), _values(1.0))
    store.write_run(_run("b", 1), _values(10.0))
    store.write_run(_run("c", 2), _values(11.0))
    store.write_run(_run("cur", 3, status="pending"), _values(10.5))
    assert store.mark_rebaseline("b") == 1
    assert store.mark_rebaseline("b") == 0
    _, history = store.run_values_and_baselines("cur", 20)
    assert sorted(history[0]) == [10.0, 11.0]
    _, history = store.run_values_and_baselines("b", 20)  # the marked run itself starts cold
    assert history == {}


def test_history_lists_values_newest_first(store):
    for day in range(3):
        store.write_run(_run(f"r{day}", day), _values(float(day)))
    rows = store.history("rollout/raw_reward", series="s")
    assert [r["value"] for r in rows] == [2.0, 1.0, 0.0]
    assert rows[0]["logical_date"] == "2026-11-03T00:00:00+00:00"


def test_rejects_unknown_role_before_writing(store):
    with pytest.raises(StoreInputError, match="role"):
        store.write_run(_run("r1", 0, role="nightly"), _values(1.0))
    assert store.count("runs") == 0


def test_open_store_rejects_unknown_scheme():
    with pytest.raises(StoreInputError, match="unsupported store URL"):
        open_store("mysql://x")


@pytest.mark.postgres
def test_unreachable_postgres_is_retryable():
    from airflow_metric_gate.store import StoreUnavailable

    store = open_store("postgresql://postgres@127.0.0.1:1/nowhere?connect_timeout=2")
    with pytest.raises(StoreUnavailable):
        store.count("runs")


def test_text_columns_with_control_characters_round_trip(store):
    odd = ("weird\tmetric\\name\nx", '"all"', '{"rel_up":0.5}')
    store.write_run(_run("r1", 0), [ValueRow(0, *odd, 3, 0.25, 3), ValueRow(1, *COORD, 3, 1e-300, 3)])
    current, _ = store.run_values_and_baselines("r1", 20)
    assert [(v.metric_key, v.value) for v in current] == [(odd[0], 0.25), (COORD[0], 1e-300)]


def test_values_keep_full_float_precision(store):
    value = 0.1 + 0.2
    store.write_run(_run("r1", 0), _values(value, 1 / 3))
    current, _ = store.run_values_and_baselines("r1", 20)
    assert [v.value for v in current] == [value, 1 / 3]
