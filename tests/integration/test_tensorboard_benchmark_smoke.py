"""benchmarks/tensorboard_read.py runs end to end at a small scale (figures checked for presence, never for speed)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

pytestmark = [pytest.mark.slow, pytest.mark.benchmark]


def test_tensorboard_read_benchmark_writes_its_figures(tmp_path):
    pytest.importorskip("tensorboardX")
    pytest.importorskip("tbparse")
    output = tmp_path / "figures.json"
    proc = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "tensorboard_read.py"), "--points", "2000", "--tags", "4",
         "--repeat", "1", "--workdir", str(tmp_path), "--output", str(output)],
        capture_output=True, text=True, cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)}, timeout=600,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    figures = json.loads(output.read_text())
    assert figures["same_points_as_tbparse"] is True
    assert figures["points"] == 2000
    for key in ("speedup_vs_tbparse", "ours_output_bytes", "file_bytes"):
        assert figures[key] > 0, key
    assert "speed-up vs tbparse" in proc.stdout
