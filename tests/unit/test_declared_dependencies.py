"""Every third-party module the package imports unconditionally is installed by its declared dependencies.

A module imported at the top of a package file (not inside ``try``) must come from a distribution
that ``pip install airflow-metric-gate`` brings: one of ``[project] dependencies`` or one of theirs.
Optional formats and notifiers import theirs inside ``try`` or a function, behind an extra.
"""

from __future__ import annotations

import ast
import re
import sys
from importlib import metadata
from pathlib import Path

import pytest

try:
    import tomllib
except ImportError:  # Python 3.10
    tomllib = pytest.importorskip("tomli")

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "airflow_metric_gate"


def _name(requirement: str) -> str:
    return re.split(r"[\s;<>=!~\[(]", requirement, maxsplit=1)[0].lower().replace("_", "-")


def _installed_by(declared: list[str]) -> set[str]:
    """The distributions the declared requirements install, theirs included (extras left out)."""
    seen: set[str] = set()
    todo = [_name(r) for r in declared]
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        try:
            requires = metadata.requires(name) or []
        except metadata.PackageNotFoundError:
            continue
        todo += [_name(r) for r in requires if "extra ==" not in r]
    return seen


def _top_level_imports(path: Path) -> set[str]:
    """Modules imported by statements at the top of a file, outside ``try`` and ``if TYPE_CHECKING``."""
    found: set[str] = set()
    for node in ast.parse(path.read_text(encoding="utf-8")).body:
        if isinstance(node, ast.Import):
            found |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.add(node.module.split(".")[0])
    return found


def test_every_unconditional_import_is_a_declared_dependency():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    installed = _installed_by(project["dependencies"])
    distributions = metadata.packages_distributions()
    missing = []
    for path in sorted(PACKAGE.rglob("*.py")):
        for module in sorted(_top_level_imports(path)):
            if module in sys.stdlib_module_names or module in ("airflow_metric_gate", "__future__"):
                continue
            names = {d.lower().replace("_", "-") for d in distributions.get(module, [])}
            if not names & installed:
                missing.append(f"{path.relative_to(ROOT)}: {module} (from {sorted(names) or 'nothing installed'})")
    assert not missing, "imported but not installed by [project] dependencies:\n" + "\n".join(missing)
