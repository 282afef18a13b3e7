"""``metric-gate demo --workdir``: an earlier demo's store is refused, or removed with ``--fresh``."""

from __future__ import annotations

import json

from airflow_metric_gate.cli import main
from airflow_metric_gate.demo import DEMO_FILES, SERIES, clear_workdir, print_verdicts
from airflow_metric_gate.store import open_store
from airflow_metric_gate.store.sqlite import SQLiteStore


def test_a_workdir_holding_an_earlier_store_is_refused(capsys, tmp_path):
    record, gates = tmp_path / "night.jsonl", tmp_path / "gates.yaml"
    record.write_text(json.dumps({"metric": "m", "series": [[0, 1.0]]}) + "\n")
    gates.write_text("gates:\n  - metric_key: m\n    steps: all\n    constraint: {rel_up: 0.1, rel_down: 0.1}\n")
    work = tmp_path / "demo"
    work.mkdir()
    store = f"sqlite:///{work / 'metric_gate.db'}"
    assert main(["run", str(record), "--gates", str(gates), "--store", store]) == 0
    capsys.readouterr()
    assert main(["demo", "--workdir", str(work)]) == 2  # refused before Airflow starts
    err = capsys.readouterr().err
    assert "already holds a demo metric store with 1 run(s)" in err and "--fresh" in err
    assert "metric-gate: nothing was stored" in err
    with open_store(store) as s:
        assert s.count("runs") == 1


def test_fresh_removes_only_what_the_demo_wrote(tmp_path):
    for name in DEMO_FILES:
        if "." in name:
            (tmp_path / name).write_text("old")
        else:
            (tmp_path / name).mkdir()
            (tmp_path / name / "old").write_text("old")
    (tmp_path / "notes.txt").write_text("mine")
    clear_workdir(tmp_path)
    assert [p.name for p in tmp_path.iterdir()] == ["notes.txt"]


def test_each_verdict_the_demo_prints_says_which_night_it_is(capsys, tmp_path):
    """The first night's verdict and the regressed night's are printed one above the other: each is labelled."""
    gates = tmp_path / "gates.yaml"
    gates.write_text("gates:\n  - metric_key: m\n    steps: all\n    constraint: {rel_up: 0.1, rel_down: 0.1}\n")
    store_path = tmp_path / "metric_gate.db"
    for day, value in ((1, 1.0), (2, 1.0), (3, 5.0)):
        record = tmp_path / f"night{day}.jsonl"
        record.write_text(json.dumps({"metric": "m", "series": [[0, value]]}) + "\n")
        main(["run", str(record), "--gates", str(gates), "--series", SERIES, "--store", f"sqlite:///{store_path}",
              "--run-id", f"night-{day}", "--logical-date", f"2026-11-0{day}T00:00:00Z"])
    capsys.readouterr()
    with SQLiteStore(store_path) as store:
        runs = sorted(store.list_runs(series=SERIES, limit=10), key=lambda r: r.logical_date)
        print_verdicts(store, runs, regressed=True)
    out = capsys.readouterr().out
    first = "[demo] verdict of night 1/3 2026-11-01 (the first clean night: no history to compare with yet), "
    last = "[demo] verdict of night 3/3 2026-11-03 (the regressed night), as metric-gate show night-3 prints it:"
    assert first + "as metric-gate show night-1 prints it:" in out
    assert last in out
    verdicts = [out.index(text) for text in (first, "run night-1: TRUSTED", last, "run night-3: NOT-TRUSTED")]
    assert verdicts == sorted(verdicts)
