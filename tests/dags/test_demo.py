"""``metric-gate demo`` (the README's first command) runs the nightly DAG through Airflow to its end."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest

pytestmark = pytest.mark.airflow_db


def test_demo_builds_history_then_fails_the_regressed_night(tmp_path):
    proc = subprocess.run(
        [sys.executable, "-m", "airflow_metric_gate.cli", "demo", "--nights", "2", "--workdir", str(tmp_path)],
        capture_output=True, text=True, timeout=900, check=False,
    )
    out = proc.stdout
    assert proc.returncode == 0, out[-4000:] + proc.stderr[-4000:]
    assert out.count("DAG run succeeded") == 2 and out.count("DAG run FAILED") == 1
    assert "NOT-TRUSTED" in out
    assert "FAIL    rollout/raw_reward" in out  # the failing coordinate is shown
    assert "3 nights stored" in out
    assert "temporary" not in out  # the Airflow home is in --workdir
    assert (tmp_path / "metric_gate.db").exists()
    assert f"metric-gate history rollout/raw_reward --series demo-rl --store sqlite:///{tmp_path}" in out
    assert "TRUSTED (121 results, 0 fail, 0 error)\n" in out  # the per-night summary line, nothing after it
    # the replay command the demo prints works as printed: it re-judges the three nights
    printed = re.search(r"\S*metric-gate (replay --series demo-rl .*)$", out, re.MULTILINE)
    assert printed, out[-2000:]
    replayed = subprocess.run([sys.executable, "-m", "airflow_metric_gate.cli", *printed.group(1).split()],
                              capture_output=True, text=True, timeout=300, check=False)
    assert replayed.returncode == 0, replayed.stderr
    assert "1 of 3 night(s) would fail (stored: 1 untrusted)" in replayed.stdout


    # The task logs the demo points at exist and hold the regressed night's metric_gate.evaluate_gate log.
    pointed = re.search(r"task logs[^:]*: (\S+)", out)
    assert pointed, out[-2000:]
    named = pointed.group(1)
    assert named == str(tmp_path / "logs" / "2026-11-03.log"), named
    assert "starting task_id=metric_gate.evaluate_gate" in (tmp_path / "logs" / "2026-11-03.log").read_text()

    # The regressed night's metric_gate.evaluate_gate log opens with one summary line per failing declaration.
    log = (tmp_path / "logs" / "2026-11-03.log").read_text()
    task = log[log.index("starting task_id=metric_gate.evaluate_gate"):]
    ours = [line for line in task.splitlines() if "operators.evaluate" in line]
    assert "REGRESSED train/grad_norm (steps \"all\"): 15 of 40 steps FAIL, steps 25..39, above band" in ours[0]
    assert "REGRESSED rollout/raw_reward (steps \"all\"): 30 of 40 steps FAIL, steps 10..39, below band" in ours[1]
    # the calibrating night left the constraint's band: a level shift, with the accept command beside it
    shifts = sorted(line.split("] ", 1)[1] for line in ours[2:4])
    assert shifts[0].startswith("LEVEL SHIFT rollout/raw_reward (steps \"all\") since 2026-11-03"), shifts
    assert shifts[1].startswith("LEVEL SHIFT train/grad_norm (steps \"all\") since 2026-11-03"), shifts
    assert all("(new tonight; adopted after 5 nights). If the new level is right: metric-gate accept" in line
               for line in shifts)
    grep_line = re.search(r"metric-gate: demo-rl run \S+: NOT-TRUSTED \(123 results, 47 fail, 0 error\)", ours[4])
    assert grep_line
    assert task.count("FAIL    rollout/raw_reward") == 5 and task.count("FAIL    train/grad_norm") == 5  # no wall
    assert "... 26 more result(s) of rollout/raw_reward not shown" in task
    assert "Every result: metric-gate show " in task
    # The demo's own rebuilt verdict (what metric-gate show prints) agrees with the task's counts.
    night_line = grep_line.group(0).removeprefix("metric-gate: ")
    assert out.count(night_line) == 2  # the demo's per-night line, and the verdict it rebuilt from the store
    assert out.index("REGRESSED train/grad_norm") < out.index(grep_line.group(0))
