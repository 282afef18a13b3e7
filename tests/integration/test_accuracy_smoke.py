"""The accuracy simulator and the replay speed benchmark run end to end at smoke scale (no timing asserted)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.slow, pytest.mark.benchmark]

ROOT = Path(__file__).resolve().parents[2]


def _run(script: str, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / script), "--scale", "smoke", *args],
        capture_output=True, text=True, cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)}, timeout=900,
        check=False,
    )


def test_accuracy_smoke_run_reports_every_metric_and_kind(tmp_path):
    output = tmp_path / "accuracy.json"
    proc = _run("accuracy.py", "--output", str(output))
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    variants = json.loads(output.read_text())
    robust = "band: mad, mad_k: 6, min_failing_steps: 4"
    best = f"{robust}; night_mean_k: 8 on the two KLs"
    warn = "severity: warn on train/grad_norm"
    assert list(variants) == ["defaults", "min_failing_steps: 3", robust, best, warn]
    figures = variants["defaults"]
    assert figures["clean_nights"] > 0
    # an untrusted night never feeds a later baseline (checked with the store's own query)
    assert figures["untrusted_nights_in_later_baselines"] == 0
    rows = {row["metric"]: row for row in figures["metrics"]}
    assert "rollout/raw_reward" in rows and "train/grad_norm" in rows
    injected = [row[kind] for row in rows.values() for kind in ("nan_burst", "vanish") if row[kind]["episodes"]]
    assert injected and all(cell["first_night"] == 1.0 for cell in injected)  # always an ERROR
    assert "| metric | false alarms |" in proc.stdout
    # the opt-in rule never flags more clean nights than the defaults on the same nights
    assert variants["min_failing_steps: 3"]["clean_nights_flagged"] <= figures["clean_nights_flagged"]
    assert variants["min_failing_steps: 3"]["untrusted_nights_in_later_baselines"] == 0
    assert variants[robust]["untrusted_nights_in_later_baselines"] == 0
    assert variants[best]["untrusted_nights_in_later_baselines"] == 0
    # severity warn changes what fails the gate, not what is trusted
    assert variants[warn]["clean_nights_flagged"] == figures["clean_nights_flagged"]
    assert variants[warn]["clean_nights_paged"] <= figures["clean_nights_paged"] == figures["clean_nights_flagged"]
    assert "### Against the target" in proc.stdout


def test_accuracy_is_deterministic_from_the_seed(tmp_path):
    outputs = []
    for name in ("a.json", "b.json"):
        proc = _run("accuracy.py", "--seed", "3", "--output", str(tmp_path / name))
        assert proc.returncode == 0, proc.stderr[-3000:]
        variants = json.loads((tmp_path / name).read_text())
        for figures in variants.values():
            figures.pop("elapsed_s")
        outputs.append(variants)
    assert outputs[0] == outputs[1]


def test_replay_speed_smoke_run(tmp_path):
    output = tmp_path / "replay.json"
    proc = _run("replay_speed.py", "--output", str(output))
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    figures = json.loads(output.read_text())
    assert figures["replayed_nights"] == figures["nights"] == 30
    assert figures["replay_s"] > 0 and figures["evaluate_every_night_s"] > 0
    # the read alone passes over every stored value once: 30 nights x 500 coordinates
    assert figures["values_read"] == figures["nights"] * figures["coords"] == 15_000
    assert figures["read_only_s"] >= 0 and "read_only_vs_one_night_evaluate" in figures
    # the leanest judging loop and replay judge the same values against the same windows (nothing
    # fails on these quiet nights, so feeding every night, as the lean loop does, changes nothing)
    assert figures["lean_judging_failed"] == figures["replay_failed"]
    assert figures["lean_judging_s"] >= 0 and "lean_judging_vs_one_night_evaluate" in figures


def test_write_docs_is_refused_below_full_scale():
    page = ROOT / "docs" / "accuracy.md"
    before = page.read_bytes()
    try:
        proc = _run("accuracy.py", "--write-docs")  # --scale smoke
        after = page.read_bytes()
    finally:
        page.write_bytes(before)  # a failing run must not leave smoke figures in the docs
    assert proc.returncode == 2, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "--write-docs needs --scale full" in proc.stderr
    assert proc.stdout == ""  # refused before measuring anything
    assert after == before
