"""The accuracy suite runs every family end to end at smoke scale, deterministically, from its cache on a rerun."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("numpy")
pytest.importorskip("sklearn")
pytest.importorskip("gymnasium")

pytestmark = [pytest.mark.slow, pytest.mark.benchmark]

ROOT = Path(__file__).resolve().parents[2]
BENCHMARKS = ROOT / "benchmarks"


def _run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, str(BENCHMARKS / "accuracy_suite.py"), "--scale", "smoke", *args],
        capture_output=True, text=True, cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)}, timeout=600,
        check=False,
    )


def _figures(path: Path) -> dict:
    result = json.loads(path.read_text())
    for run in result["runs"]:
        run.pop("elapsed_s")
    result.pop("elapsed_s")
    return result


def test_every_family_runs_through_the_pipeline_and_reruns_from_the_cache(tmp_path):
    cache = tmp_path / "cache"
    first = _run("--cache", str(cache), "--json", str(tmp_path / "a.json"))
    assert first.returncode == 0, first.stdout[-3000:] + first.stderr[-3000:]
    result = _figures(tmp_path / "a.json")
    assert result["policy"] == "reference"
    assert sorted({r["family"] for r in result["runs"]}) == ["cartpole", "digits", "rlsim", "sim60"]
    for run in result["runs"]:
        assert run["clean_nights_counted"] > 0 and run["false_alarm_rate"] is not None
        assert run["faults"], run["family"]
        for kind in run["faults"].values():
            assert kind["episodes"] and 0.0 <= kind["caught"] <= 1.0
            assert kind["first_night"] <= kind["within_3"] <= kind["within_10"] <= kind["caught"]
    by_family = {r["family"]: r for r in result["runs"]}
    # a non-finite value and an absent metric are ERRORs from the first night on
    assert by_family["rlsim"]["faults"]["nan"]["first_night"] == 1.0
    assert by_family["rlsim"]["faults"]["missing_metric"]["first_night"] == 1.0
    assert by_family["sim60"]["faults"]["vanish"]["first_night"] == 1.0
    assert len(by_family["rlsim"]["changes"]) == 2
    assert "| fault | episodes a seed |" in first.stdout and "### Against the targets" in first.stdout
    # one folder per night of JSON Lines records, clean year and episodes, under the cache
    nights = sorted(cache.glob("*/rlsim/*/clean/night-*"))
    assert len(nights) == by_family["rlsim"]["nights"]
    line = json.loads((nights[0] / "rollout-0.jsonl").read_text().splitlines()[0])
    assert set(line) == {"metric", "series"}
    trained = sorted(p.stat().st_mtime_ns for p in cache.glob("*/digits/**/train-0.jsonl"))
    assert trained

    again = _run("--cache", str(cache), "--json", str(tmp_path / "b.json"))
    assert again.returncode == 0, again.stderr[-3000:]
    assert _figures(tmp_path / "b.json") == result  # deterministic
    # the rerun read the cached records: nothing was trained again
    assert sorted(p.stat().st_mtime_ns for p in cache.glob("*/digits/**/train-0.jsonl")) == trained


def test_policy_key_and_the_night_callback(tmp_path, monkeypatch):
    monkeypatch.syspath_prepend(str(BENCHMARKS))
    import accuracy_suite
    from families import get_family

    family = get_family("rlsim")
    assert "policy" not in accuracy_suite.PolicyUnderTest().gates_document(family)
    doc = accuracy_suite.PolicyUnderTest("calibrated").gates_document(family)
    assert list(doc)[0] == "policy" and doc["policy"] == "calibrated" and doc["gates"] == family.gates()["gates"]

    seen = []

    def on_night(outcome):
        assert outcome.store is not None and outcome.verdict["run_id"] == outcome.run_id
        assert outcome.gates_path.exists()
        seen.append((outcome.label.episode.key if outcome.label.episode else None, outcome.label.night))

    scale = {**accuracy_suite.SCALES["smoke"], "nights": 16, "warmup": 3, "change_window": 2}
    figures = accuracy_suite.measure("rlsim", 1, 8, scale, accuracy_suite.PolicyUnderTest(on_night=on_night),
                                     tmp_path / "cache", tmp_path / "work", kinds=["lr_x10", "shift_10"])
    clean = [night for key, night in seen if key is None]
    assert clean == list(range(16))  # every clean night, in logical-date order
    episodes = {key for key, _ in seen if key is not None}
    assert len(episodes) == 2 and set(figures["faults"]) == {"lr_x10", "shift_10"}
    shift = [night for key, night in seen if key is not None and key.startswith("shift_10")]
    assert len(shift) == 5 and shift == sorted(shift)


def test_on_level_shift_accepts_what_the_verdict_reports_and_is_counted(tmp_path, monkeypatch):
    monkeypatch.syspath_prepend(str(BENCHMARKS))
    import accuracy_suite

    accepted = []
    callback = accuracy_suite.on_level_shift(
        detect=lambda verdict: verdict["run_id"] == "night-0009" and "night-0007",
        accept=lambda outcome, since: accepted.append((outcome.label.episode, outcome.run_id, since)),
    )
    scale = {**accuracy_suite.SCALES["smoke"], "nights": 12, "warmup": 3, "change_window": 2}
    figures = accuracy_suite.measure("sim60", 1, 6, scale, accuracy_suite.PolicyUnderTest(on_night=callback),
                                     tmp_path / "cache", tmp_path / "work", kinds=["shift30"])
    clean = [a for a in accepted if a[0] is None]
    assert clean == [(None, "night-0009", "night-0007")]
    assert figures["accepts_in_clean_year"] == 1


def test_each_episode_keeps_what_the_calibrated_verdict_said_on_its_first_night(tmp_path, monkeypatch):
    monkeypatch.syspath_prepend(str(BENCHMARKS))
    import accuracy_suite

    scale = {**accuracy_suite.SCALES["smoke"], "nights": 20, "warmup": 10, "change_window": 2}
    figures = accuracy_suite.measure("rlsim", 1, 8, scale, accuracy_suite.PolicyUnderTest("calibrated"),
                                     tmp_path / "cache", tmp_path / "work", kinds=["lr_x10"])
    (episode,) = figures["faults"]["lr_x10"]["episodes"]
    assert episode["first_night"], "no affected metric kept"
    outcomes = set()
    for metric, entries in episode["first_night"].items():
        sections = {entry["section"]: entry for entry in entries}
        # the declaration's night, judged against its history: outcome, statistic and band
        night = sections["declarations"]
        outcomes.add(night["outcome"])
        if night["outcome"] == "pass":  # judged by the night test: its statistic and band
            assert isinstance(night["z"], float) and night["threshold"] > 0, (metric, night)
        if "blowups" in sections:  # a blow-up fails before the night test
            assert night["outcome"] in ("fail", "shift") and sections["blowups"]["count"] > 0
    if episode["first_caught"] == 0:
        assert outcomes - {"pass", "inactive"}, outcomes
    else:
        assert not outcomes & {"fail", "error"}, outcomes

    reference = accuracy_suite.measure("rlsim", 1, 8, scale, accuracy_suite.PolicyUnderTest(),
                                       tmp_path / "cache", tmp_path / "work", kinds=["lr_x10"])
    (episode,) = reference["faults"]["lr_x10"]["episodes"]
    assert all(entries == [] for entries in episode["first_night"].values())  # no calibrated sections
