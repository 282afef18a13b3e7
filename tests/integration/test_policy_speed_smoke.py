"""benchmarks/policy_speed.py runs end to end at smoke scale (figures checked for shape, never time)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.slow, pytest.mark.benchmark]

ROOT = Path(__file__).resolve().parents[2]


def test_policy_speed_smoke_times_both_policies_on_the_same_nights():
    proc = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "policy_speed.py"), "--scale", "smoke", "--json"],
        capture_output=True, text=True, cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)}, timeout=600,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    figures = json.loads(proc.stdout)
    assert figures["coordinates"] == 40 and figures["history_nights"] == 6
    assert set(figures["seconds"]) == {"reference", "calibrated"}
    assert all(s > 0 for s in figures["seconds"].values()) and figures["calibrated_over_reference"] > 0
