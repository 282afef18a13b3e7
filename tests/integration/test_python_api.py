"""The public Python API: ``from airflow_metric_gate import load_declarations, run_gate, Verdict``."""

from __future__ import annotations

import dataclasses
import json
import os
import re
import subprocess
import sys
from datetime import datetime
from pathlib import Path

import pytest

from airflow_metric_gate import DeclarationError, StoreInputError, Verdict, load_declarations, pipeline, run_gate
from airflow_metric_gate.store import open_store

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "python_api.py"
PAGE = ROOT / "docs" / "python-api.md"

GATES = [
    {"metric_key": "eval/accuracy", "steps": "last", "constraint": {"rel_down": 0.05, "rel_up": 0.05}},
    {"metric_key": "train/loss", "steps": [100, 200], "constraint": {"rel_down": 0.5, "rel_up": 0.2}},
]


def _record(folder: Path, night: str, accuracy: float, loss: float = 1.0) -> Path:
    path = folder / f"{night}.jsonl"
    lines = [
        {"metric": "eval/accuracy", "series": [[100, accuracy - 0.1], [200, accuracy]]},
        {"metric": "train/loss", "series": [[100, loss * 1.5], [200, loss]]},
    ]
    path.write_text("".join(json.dumps(x) + "\n" for x in lines))
    return path


def test_load_declarations_reads_every_source_alike(tmp_path: Path) -> None:
    (tmp_path / "gates.yaml").write_text("gates:\n" + "".join(
        f"  - {json.dumps(g)}\n" for g in GATES))
    (tmp_path / "gates.json").write_text(json.dumps(GATES))
    (tmp_path / "test_gates.py").write_text("".join(
        "register_ci_gate(" + ", ".join(f"{k}={v!r}" for k, v in g.items()) + ")\n" for g in GATES))
    from_list = load_declarations(GATES)
    assert [d.metric_key for d in from_list] == ["eval/accuracy", "train/loss"]
    for name in ("gates.yaml", "gates.json", "test_gates.py"):
        assert load_declarations(tmp_path / name) == from_list, name
        assert load_declarations(str(tmp_path / name)) == from_list, name
    assert load_declarations(from_list) == from_list  # resolved declarations pass through


def test_load_declarations_refuses_bad_input() -> None:
    with pytest.raises(DeclarationError, match="gate 1 .*rel_tol"):
        load_declarations([{"metric_key": "m", "steps": "last", "constraint": {"rel_tol": 1}}])
    with pytest.raises(TypeError, match="a path or a list"):
        load_declarations(42)


def test_run_gate_returns_the_verdict_the_pipeline_builds(tmp_path: Path, store_url: str) -> None:
    """Same inputs, same verdict: ``Verdict.to_dict()`` is exactly the pipeline's JSON."""
    reference = open_store(f"sqlite:///{tmp_path / 'reference.db'}")
    nights = [("2026-11-01", 0.80), ("2026-11-02", 0.81), ("2026-11-03", 0.80), ("2026-11-04", 0.70)]
    for i, (night, accuracy) in enumerate(nights):
        record = _record(tmp_path, night, accuracy)
        verdict = run_gate(record, GATES, series="rl-7b", backend="cpu", suite="nightly", store=store_url,
                           run_id=f"night-{i}", logical_date=night, enforce=True, all_results=True)
        expected = pipeline.run_gate(
            reference, record=record, declarations=load_declarations(GATES),
            identity=pipeline.SeriesIdentity("rl-7b", "cpu", "nightly"),
            run=pipeline.RunInfo(run_id=f"night-{i}", role="baseline",
                                 logical_date=datetime.fromisoformat(night + "T00:00:00+00:00")),
            enforce=True, all_results=True,
        )
        assert isinstance(verdict, Verdict)
        assert verdict.to_dict() == expected
        assert list(verdict.to_dict()) == list(expected)  # the documented key order
        assert json.dumps(verdict.to_dict()) == json.dumps(expected)
    reference.close()
    assert not verdict.trusted and verdict.blocked and verdict.counts["FAIL"] == 1
    assert (verdict.series, verdict.backend, verdict.suite, verdict.role) == ("rl-7b", "cpu", "nightly", "baseline")
    assert verdict.logical_date.startswith("2026-11-04")
    assert "REGRESSED eval/accuracy" in verdict.report()
    with pytest.raises(dataclasses.FrozenInstanceError):
        verdict.trusted = True  # type: ignore[misc]
    copy = verdict.to_dict()
    copy["counts"]["FAIL"] = 0
    assert verdict.counts["FAIL"] == 1  # to_dict() hands out a copy


def test_run_gate_uses_an_open_store_and_leaves_it_open(tmp_path: Path, store) -> None:
    for i, night in enumerate(("2026-11-01", "2026-11-02")):
        verdict = run_gate(_record(tmp_path, night, 0.8), GATES, series="s", store=store, logical_date=night,
                           run_id=f"r{i}", role="shadow", provenance={"commit_sha": "abc123"})
        assert verdict.role == "shadow" and not verdict.blocked
    runs = store.list_runs(series="s", limit=10)
    assert {r.run_id for r in runs} == {"r0", "r1"}
    assert {r.provenance.get("commit_sha") for r in runs} == {"abc123"}


def test_run_gate_refuses_bad_input_and_stores_nothing(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'm.db'}"
    with pytest.raises(StoreInputError, match="logical_date: not an ISO 8601"):
        run_gate(_record(tmp_path, "n", 0.8), GATES, series="s", store=url, logical_date="yesterday")
    with pytest.raises(DeclarationError):
        run_gate(_record(tmp_path, "n", 0.8), [{"metric_key": "unknown/metric"}], series="s", store=url)
    with open_store(url) as store:
        assert store.list_runs(series="s", limit=10) == []


def test_the_documented_example_runs_and_leaves_no_folder_behind(tmp_path: Path) -> None:
    temp = tmp_path / "temp"
    temp.mkdir()
    proc = subprocess.run([sys.executable, str(EXAMPLE)], cwd=tmp_path, capture_output=True, text=True,
                          timeout=300, check=False, env={**os.environ, "TMPDIR": str(temp)})
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "2026-11-04 NOT trusted" in proc.stdout
    assert "REGRESSED eval/accuracy" in proc.stdout
    assert list(temp.iterdir()) == []


def test_the_python_api_page_shows_the_example_unchanged() -> None:
    blocks = re.findall(r"^```python\n(.*?)^```$", PAGE.read_text(encoding="utf-8"), flags=re.M | re.S)
    assert EXAMPLE.read_text(encoding="utf-8") in blocks, (
        "docs/python-api.md must show examples/python_api.py verbatim in a ```python block"
    )


def _gate_four_nights(tmp_path: Path, store) -> None:
    for i, (night, accuracy) in enumerate([("2026-11-01", 0.80), ("2026-11-02", 0.81), ("2026-11-03", 0.80),
                                           ("2026-11-04", 0.70)]):
        run_gate(_record(tmp_path, night, accuracy), GATES, series="rl-7b", store=store, run_id=f"night-{i}",
                 logical_date=night)


def test_replay_takes_a_store_url_or_an_open_store_and_any_declarations(tmp_path: Path, monkeypatch) -> None:
    from airflow_metric_gate.replay import replay
    from airflow_metric_gate.store.sqlite import SQLiteStore

    url = f"sqlite:///{tmp_path / 'm.db'}"
    _gate_four_nights(tmp_path, url)
    with open_store(url) as store:
        expected = replay(store, "rl-7b", declarations=load_declarations(GATES))
        assert store._conn is not None  # an open store is left open
    assert [f["run_id"] for g in expected["declarations"] for f in g["failed"]] == ["night-3"]
    closed = []
    close = SQLiteStore.close
    monkeypatch.setattr(SQLiteStore, "close", lambda self: (closed.append(self.path), close(self)))
    (tmp_path / "gates.json").write_text(json.dumps(GATES))
    for declarations in (GATES, tmp_path / "gates.json", str(tmp_path / "gates.json"), load_declarations(GATES)):
        assert replay(url, "rl-7b", declarations=declarations) == expected, declarations
    assert closed == [str(tmp_path / "m.db")] * 4  # each store it opened is closed
    monkeypatch.setenv("METRIC_GATE_STORE", url)
    stored = replay(None, "rl-7b")  # the declarations stored with each night
    assert stored["settings"]["declarations"] == "stored" and stored["summary"]["nights"] == 4


def test_replay_refuses_what_is_neither_a_store_nor_declarations(tmp_path: Path) -> None:
    from airflow_metric_gate.replay import replay

    url = f"sqlite:///{tmp_path / 'm.db'}"
    _gate_four_nights(tmp_path, url)
    with pytest.raises(TypeError, match="store: expected a store URL or an open store, not int"):
        replay(42, "rl-7b")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="expected a path or a list of mappings, not int"):
        replay(url, "rl-7b", declarations=42)  # type: ignore[arg-type]
    with pytest.raises(StoreInputError, match="no metric store at"):
        replay(f"sqlite:///{tmp_path / 'missing.db'}", "rl-7b")  # read-only: nothing is created
    assert not (tmp_path / "missing.db").exists()
    with pytest.raises(TypeError, match="store: expected a store URL or an open store, not int"):
        run_gate(_record(tmp_path, "n", 0.8), GATES, series="s", store=42)  # type: ignore[arg-type]
