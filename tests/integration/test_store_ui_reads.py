"""The store's reads for the UI, and its hand mark by run id, on both backends."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest

from airflow_metric_gate.store import RunRow, StoreInputError, ValueRow

T0 = datetime(2026, 11, 1, tzinfo=timezone.utc)
COORD = ("rollout/raw_reward", '"all"', '{"rel_down":0.1}')


def _run(run_id, day, *, role="baseline", status="trusted", series="s", dag_id="gate_dag"):
    return RunRow(run_id=run_id, series=series, backend="cuda", suite="nightly", role=role, status=status,
                  logical_date=T0 + timedelta(days=day), provenance={"dag_id": dag_id} if dag_id else {},
                  status_reason="3 PASS, 1 FAIL")


def _values(*values):
    return [ValueRow(i, *COORD, i, v, i) for i, v in enumerate(values)]


@pytest.fixture
def history(store):
    store.write_run(_run("r0", 0, dag_id=None), _values(1.0, 2.0))  # written by the CLI
    for day in range(1, 6):
        store.write_run(_run(f"r{day}", day), _values(1.0 + day, 2.0 + day))
    store.write_run(_run("shadow", 3, role="shadow", status="untrusted"), _values(9.0, 9.0))
    store.write_run(_run("other", 4, series="other", dag_id="other_dag"), _values(5.0, 5.0))
    return store


def test_coordinate_history_is_the_latest_nights_oldest_first(history):
    rows = history.coordinate_history("s", "cuda", "nightly", metric_key=COORD[0], steps_key=COORD[1],
                                      constraint_key=COORD[2], step=1, limit=3)
    assert [(r["run_id"], r["value"]) for r in rows] == [("shadow", 9.0), ("r4", 6.0), ("r5", 7.0)]
    every = history.coordinate_history("s", "cuda", "nightly", metric_key=COORD[0], steps_key=COORD[1],
                                       constraint_key=COORD[2], step=1, limit=100)
    assert [r["run_id"] for r in every] == ["r0", "r1", "r2", "r3", "shadow", "r4", "r5"]
    assert [r["logical_date"] for r in every] == sorted(r["logical_date"] for r in every)
    assert {r["run_id"]: r["role"] for r in every}["shadow"] == "shadow"


def test_coordinate_history_stops_at_a_date_and_keeps_to_readable_dags(history):
    args = dict(metric_key=COORD[0], steps_key=COORD[1], constraint_key=COORD[2], step=0)
    until = history.coordinate_history("s", "cuda", "nightly", until=T0 + timedelta(days=2), **args)
    assert [r["run_id"] for r in until] == ["r0", "r1", "r2"]
    scoped = history.coordinate_history("s", "cuda", "nightly", dag_ids={"gate_dag"}, include_unowned=False, **args)
    assert "r0" not in [r["run_id"] for r in scoped] and len(scoped) == 6
    with_cli = history.coordinate_history("s", "cuda", "nightly", dag_ids={"gate_dag"}, include_unowned=True, **args)
    assert [r["run_id"] for r in with_cli][0] == "r0"
    nothing = history.coordinate_history("s", "cuda", "nightly", dag_ids=set(), include_unowned=False, **args)
    assert nothing == []
    hostile = history.coordinate_history("s", "cuda", "nightly", dag_ids={"x' OR '1'='1"}, **args)
    assert [r["run_id"] for r in hostile] == ["r0"]  # bound, never spliced into the SQL


def test_series_runs_pages_newest_first(history):
    first = history.series_runs("s", "cuda", "nightly", limit=3)
    second = history.series_runs("s", "cuda", "nightly", limit=3, offset=3)
    ids = [r.run_id for r in first + second]
    assert ids[:2] == ["r5", "r4"] and len(set(ids)) == 6
    light = history.series_runs("s", "cuda", "nightly", limit=1, declarations=False)[0]
    assert (light.run_id, light.declarations, light.status_reason) == ("r5", [], "3 PASS, 1 FAIL")
    assert history.series_runs("s", "cuda", "nightly", dag_ids=set(), include_unowned=True)[0].run_id == "r0"
    assert history.series_dag_ids("s", "cuda", "nightly") == {"gate_dag", None}
    identities = {(i["series"], i["dag_id"]): i["runs"] for i in history.series_identities()}
    assert identities == {("other", "other_dag"): 1, ("s", "gate_dag"): 6, ("s", None): 1}


def test_declaration_values_and_baselines(history):
    values = history.declaration_values("r5", *COORD)
    assert [(v.step, v.value) for v in values] == [(0, 6.0), (1, 7.0)]
    base = history.declaration_baselines("r5", *COORD, 2)
    assert {step: sorted(v) for step, v in base.items()} == {0: [4.0, 5.0], 1: [5.0, 6.0]}
    assert history.declaration_baselines("r0", *COORD, 20) == {}


def test_mark_run_records_who_and_why_once(history):
    at = datetime(2026, 12, 1, 3, 0, tzinfo=timezone.utc)
    assert history.mark_run("r5", "untrusted", reason="bad eval set", marked_by="alice", at=at) == 1
    assert history.mark_run("r5", "untrusted", reason="again", marked_by="bob", at=at) == 0  # idempotent
    run = history.get_run("r5")
    assert run.status == "untrusted"
    assert run.provenance["marks"] == [
        {"status": "untrusted", "reason": "bad eval set", "by": "alice", "at": "2026-12-01T03:00:00+00:00"}
    ]
    assert run.provenance["dag_id"] == "gate_dag"
    assert run.status_reason == "3 PASS, 1 FAIL; marked untrusted by alice: bad eval set"
    assert history.mark_run("r5", "trusted", reason="eval set fixed", marked_by="bob", at=at) == 1
    assert history.get_run("r5").status_reason == "3 PASS, 1 FAIL; marked trusted by bob: eval set fixed"
    assert [m["by"] for m in history.get_run("r5").provenance["marks"]] == ["alice", "bob"]
    assert history.get_run("r4").status == "trusted"  # only that run
    with pytest.raises(StoreInputError, match="reason"):
        history.mark_run("r4", "untrusted", reason="  ", marked_by="alice", at=at)
    with pytest.raises(StoreInputError):
        history.mark_run("r4", "pending", reason="x", marked_by="alice", at=at)
    assert history.mark_run("missing", "trusted", reason="x", marked_by="alice", at=at) == 0
