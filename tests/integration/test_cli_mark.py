"""``mark-untrusted`` / ``mark-trusted``: scoped to one DAG (and series), say what changed, never drop a reason."""

from __future__ import annotations

from datetime import datetime, timezone

import pytest

from airflow_metric_gate.cli import main
from airflow_metric_gate.store import RunRow, StoreInputError, ValueRow, open_store

NIGHT = datetime(2026, 11, 30, tzinfo=timezone.utc)
AIRFLOW_RUN = "scheduled__2026-11-30T00:00:00+00:00"
COORD = ("rollout/raw_reward", '"all"', '{"rel_up":0.5}')
# (store run id, dag id, series): the same Airflow run id in two DAGs, two series in one DAG
RUNS = [("a-7b", "dag_a", "rl-7b"), ("a-70b", "dag_a", "rl-70b"), ("b-7b", "dag_b", "rl-7b")]


@pytest.fixture
def url(store_url):
    with open_store(store_url) as store:
        for run_id, dag_id, series in RUNS:
            row = RunRow(run_id=run_id, series=series, backend="cuda", suite="nightly", role="baseline",
                         status="trusted", logical_date=NIGHT, status_reason="1 PASS",
                         provenance={"dag_id": dag_id, "airflow_run_id": AIRFLOW_RUN, "commit_sha": "abc"})
            store.write_run(row, [ValueRow(0, *COORD, 0, 1.0, 0)])
    return store_url


def _mark(capsys, *argv):
    code = main([*argv])
    out, err = capsys.readouterr()
    return code, out, err


def _state(url):
    with open_store(url) as store:
        return {run_id: (store.get_run(run_id).status, store.get_run(run_id).status_reason) for run_id, _, _ in RUNS}


def test_airflow_run_id_requires_dag_id(capsys, url):
    code, _, err = _mark(capsys, "mark-untrusted", "--airflow-run-id", AIRFLOW_RUN, "--store", url)
    assert code == 2
    assert "--dag-id" in err
    assert {s for s, _ in _state(url).values()} == {"trusted"}


def test_airflow_run_id_changes_only_that_dag_and_series_and_prints_it(capsys, url):
    code, out, err = _mark(capsys, "mark-untrusted", "--airflow-run-id", AIRFLOW_RUN, "--dag-id", "dag_a",
                           "--series", "rl-7b", "--reason", "bad data", "--store", url)
    assert code == 0, err
    assert _state(url) == {
        "a-7b": ("untrusted", "1 PASS; bad data"),  # the night's counts stay in front
        "a-70b": ("trusted", "1 PASS"),
        "b-7b": ("trusted", "1 PASS"),
    }
    changed = [line for line in out.splitlines() if "a-7b" in line]
    assert len(changed) == 1
    line = changed[0]
    assert "rl-7b" in line and "cuda" in line and "nightly" in line and "2026-11-30" in line
    assert "trusted -> untrusted" in line
    assert "a-70b" not in out and "b-7b" not in out
    assert "marked 1 run(s) untrusted" in out


def test_dag_id_alone_reaches_every_series_of_that_dag_run(capsys, url):
    code, out, _ = _mark(capsys, "mark-untrusted", "--airflow-run-id", AIRFLOW_RUN, "--dag-id", "dag_a",
                         "--store", url)
    assert code == 0
    state = _state(url)
    assert (state["a-7b"][0], state["a-70b"][0], state["b-7b"][0]) == ("untrusted", "untrusted", "trusted")
    assert "a-7b" in out and "a-70b" in out and "b-7b" not in out


def test_backend_and_suite_narrow_too(capsys, url):
    code, _, err = _mark(capsys, "mark-untrusted", "--airflow-run-id", AIRFLOW_RUN, "--dag-id", "dag_a",
                         "--series", "rl-7b", "--backend", "rocm", "--store", url)
    assert code == 2
    assert "backend" in err and "rocm" in err
    assert {s for s, _ in _state(url).values()} == {"trusted"}


@pytest.mark.parametrize(
    "selector",
    [["--airflow-run-id", "scheduled__1999-01-01", "--dag-id", "dag_a"],
     ["--airflow-run-id", AIRFLOW_RUN, "--dag-id", "dag_c"],
     ["--run-id", "no-such-run"],
     ["--commit", "fff"]],
    ids=["airflow-run-id", "dag-id", "run-id", "commit"],
)
def test_nothing_matched_exits_2_and_says_what_was_searched(capsys, url, selector):
    code, out, err = _mark(capsys, "mark-trusted", *selector, "--store", url)
    assert code == 2
    assert "nothing matched" in err
    for value in selector[1::2]:
        assert value in err
    assert {s for s, _ in _state(url).values()} == {"trusted"}


def test_reason_is_recorded_when_the_status_is_already_the_target(capsys, url):
    _mark(capsys, "mark-untrusted", "--run-id", "a-7b", "--store", url)
    code, out, _ = _mark(capsys, "mark-untrusted", "--run-id", "a-7b", "--reason", "confirmed regression",
                         "--store", url)
    assert code == 0
    assert _state(url)["a-7b"] == ("untrusted", "1 PASS; confirmed regression")
    line = next(line for line in out.splitlines() if "a-7b" in line)
    assert "already untrusted" in line and "reason recorded" in line
    assert "marked 0 run(s) untrusted" in out


def test_mark_trusted_prints_old_and_new_status(capsys, url):
    _mark(capsys, "mark-untrusted", "--commit", "abc", "--store", url)
    code, out, _ = _mark(capsys, "mark-trusted", "--commit", "abc", "--dag-id", "dag_b", "--store", url)
    assert code == 0
    assert "untrusted -> trusted" in next(line for line in out.splitlines() if "b-7b" in line)
    assert [s for s, _ in _state(url).values()] == ["untrusted", "untrusted", "trusted"]


def test_store_api_refuses_an_unscoped_airflow_run_id(url):
    with open_store(url) as store:
        with pytest.raises(StoreInputError, match="dag_id"):
            store.mark("untrusted", by="airflow_run_id", key=AIRFLOW_RUN)
        assert store.mark("untrusted", by="airflow_run_id", key=AIRFLOW_RUN, dag_id="dag_b") == 1
        assert [r.run_id for r in store.find_runs(by="airflow_run_id", key=AIRFLOW_RUN, dag_id="dag_a",
                                                  series="rl-70b")] == ["a-70b"]
