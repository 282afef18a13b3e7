"""A store run id belongs to one series identity: a write for another series is refused, never re-labelled."""

from __future__ import annotations

import json
from datetime import datetime, timezone

import pytest

from airflow_metric_gate.cli import main
from airflow_metric_gate.store import RunRow, StoreInputError, ValueRow, open_store

NIGHT = datetime(2026, 11, 30, tzinfo=timezone.utc)
COORD = ("rollout/raw_reward", '"all"', '{"rel_up":0.5}')


def _row(series, *, backend="cuda", suite="nightly", status="pending"):
    return RunRow(run_id="af-shared", series=series, backend=backend, suite=suite, role="baseline", status=status,
                  logical_date=NIGHT)


def _values(value):
    return [ValueRow(0, *COORD, 0, value, 0)]


@pytest.mark.parametrize(
    "other",
    [{"series": "rl-70b"}, {"series": "rl-7b", "backend": "rocm"}, {"series": "rl-7b", "suite": "weekly"}],
    ids=["series", "backend", "suite"],
)
def test_a_run_id_of_another_series_identity_is_refused_and_nothing_changes(store, other):
    store.write_run(_row("rl-7b", status="trusted"), _values(0.5))
    with pytest.raises(StoreInputError, match=r"af-shared.*rl-7b.*nothing was stored"):
        store.write_run(_row(**other), _values(9.0))
    run = store.get_run("af-shared")
    assert (run.series, run.backend, run.suite, run.status) == ("rl-7b", "cuda", "nightly", "trusted")
    current, _ = store.run_values_and_baselines("af-shared", 20)
    assert [v.value for v in current] == [0.5]
    assert store.count("runs") == 1


def test_the_same_series_identity_still_replaces_its_own_run(store):
    store.write_run(_row("rl-7b"), _values(0.5))
    store.write_run(_row("rl-7b"), _values(0.7))
    current, _ = store.run_values_and_baselines("af-shared", 20)
    assert [v.value for v in current] == [0.7]


def _record(path, reward):
    path.write_text(json.dumps({"metric": "rollout/raw_reward", "series": [[0, reward], [1, reward]]}) + "\n")
    return str(path)


def test_cli_run_id_reused_for_another_series_exits_2_and_leaves_the_first_run(capsys, tmp_path, store_url):
    gates = tmp_path / "gates.yaml"
    gates.write_text("gates:\n  - metric_key: rollout/raw_reward\n    steps: all\n")
    common = ["--gates", str(gates), "--store", store_url, "--run-id", "night-30",
              "--logical-date", "2026-11-30T00:00:00Z"]
    assert main(["run", _record(tmp_path / "a.jsonl", 0.5), "--series", "rl-7b", *common]) == 0
    capsys.readouterr()

    code = main(["run", _record(tmp_path / "b.jsonl", 9.0), "--series", "rl-70b", *common])
    _, err = capsys.readouterr()

    assert code == 2
    assert "night-30" in err and "rl-7b" in err and "rl-70b" in err
    with open_store(store_url) as store:
        run = store.get_run("night-30")
        assert (run.series, run.status) == ("rl-7b", "trusted")
        assert {r["value"] for r in store.history("rollout/raw_reward", series="rl-7b")} == {0.5}
        assert store.history("rollout/raw_reward", series="rl-70b") == []
