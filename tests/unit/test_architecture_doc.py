"""docs/architecture.md names real modules and functions only, so the contributors' map cannot drift."""

from __future__ import annotations

import importlib
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "architecture.md"

PATH = re.compile(r"\b((?:airflow_metric_gate|tests|benchmarks)/[\w./*]*[\w*]/?)")
DOTTED = re.compile(r"\bairflow_metric_gate(?:\.\w+)+")


def _text() -> str:
    return PAGE.read_text(encoding="utf-8")


def resolves(dotted: str) -> bool:
    """Whether ``dotted`` names a module, or an attribute reached from the longest importable module."""
    parts = dotted.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            target: object = importlib.import_module(".".join(parts[:cut]))
        except ModuleNotFoundError:
            continue
        for name in parts[cut:]:
            if not hasattr(target, name):
                return False
            target = getattr(target, name)
        return True
    return False


def test_the_page_is_in_the_navigation() -> None:
    assert re.search(r"^\s*- .*: architecture\.md$", (ROOT / "mkdocs.yml").read_text(encoding="utf-8"), re.M)


def test_the_page_names_paths_and_dotted_names() -> None:
    text = _text()
    assert len(set(PATH.findall(text))) >= 20
    assert len(set(DOTTED.findall(text))) >= 40


def test_every_path_exists() -> None:
    missing = [p for p in sorted(set(PATH.findall(_text())))
               if not (any(ROOT.glob(p.rstrip("/"))) if "*" in p else (ROOT / p).exists())]
    assert not missing, f"docs/architecture.md names paths that do not exist: {missing}"


def test_every_dotted_name_exists() -> None:
    missing = [d for d in sorted(set(DOTTED.findall(_text()))) if not resolves(d)]
    assert not missing, f"docs/architecture.md names modules or functions that do not exist: {missing}"


def test_a_name_that_does_not_exist_is_caught() -> None:
    assert resolves("airflow_metric_gate.pipeline.evaluate")
    assert not resolves("airflow_metric_gate.pipeline.no_such_function")
    assert not resolves("airflow_metric_gate.no_such_module.evaluate")
