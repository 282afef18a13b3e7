"""Running a benchmark script at smoke scale from a test (its figures are checked for presence, never for speed)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
#: The Postgres server the benchmarks make their own databases on.
PG_ADMIN_URL = os.environ.get("METRIC_GATE_TEST_PG_URL", "postgresql://postgres@127.0.0.1:5432/postgres")


def run_smoke(script: str, output: Path, *argv: str, timeout: float = 900) -> tuple[dict[str, Any], str]:
    """Run ``benchmarks/<script> --scale smoke`` in a process of its own; its figures (from ``output``) and stdout."""
    proc = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / script), "--scale", "smoke", *argv, "--output", str(output)],
        capture_output=True, text=True, cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)}, timeout=timeout,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return json.loads(output.read_text()), proc.stdout
