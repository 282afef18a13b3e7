"""Markers live with the tests: each benchmark smoke module says ``benchmark`` and ``slow`` itself."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SMOKE = sorted((ROOT / "tests" / "integration").glob("test_*_smoke.py"))


def _module_marks(path: Path) -> set[str]:
    """The marker names of a module's top-level ``pytestmark`` (one mark or a list of them)."""
    for node in ast.parse(path.read_text(encoding="utf-8")).body:
        if isinstance(node, ast.Assign) and [getattr(t, "id", None) for t in node.targets] == ["pytestmark"]:
            values = node.value.elts if isinstance(node.value, ast.List) else [node.value]
            return {v.attr for v in values if isinstance(v, ast.Attribute)}
    return set()


def test_every_benchmark_smoke_module_is_marked_benchmark_and_slow() -> None:
    assert len(SMOKE) >= 7
    unmarked = [p.name for p in SMOKE if not {"benchmark", "slow"} <= _module_marks(p)]
    assert not unmarked, f"pytestmark lacks benchmark or slow: {unmarked}"


def test_every_marker_used_in_a_module_is_registered() -> None:
    tomllib = pytest.importorskip("tomllib")  # Python 3.11+
    config = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    registered = {line.split(":", 1)[0] for line in config["tool"]["pytest"]["ini_options"]["markers"]}
    used = set().union(*(_module_marks(p) for p in (ROOT / "tests").rglob("test_*.py")))
    assert "benchmark" in registered
    assert used - {"parametrize", "skipif", "usefixtures", "filterwarnings"} <= registered
