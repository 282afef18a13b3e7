"""``metric-gate demo --workdir``: an earlier demo's store is refused, or removed with ``--fresh``."""

from __future__ import annotations

import json

from airflow_metric_gate.cli import main
from airflow_metric_gate.demo import DEMO_FILES, clear_workdir
from airflow_metric_gate.store import open_store


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
