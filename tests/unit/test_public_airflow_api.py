"""The package uses only Airflow's public interface: no module of it imports a private Airflow module.

A private module is one with a component starting with ``_`` below ``airflow`` (as
``airflow.sdk.definitions._internal``): Airflow changes those without notice, and the package's
pin on Airflow would then be the only guard.  Read from the source, so a lazy import inside a
function counts too.
"""

from __future__ import annotations

import ast
from pathlib import Path

import airflow_metric_gate

PACKAGE = Path(airflow_metric_gate.__file__).parent
_DYNAMIC_IMPORTS = ("importlib.import_module", "import_module", "__import__", "import_string")


def _imported(node: ast.AST) -> list[str]:
    """The modules (and ``module.name`` for ``from module import name``) one node imports."""
    if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
        return [node.module] + [f"{node.module}.{alias.name}" for alias in node.names]
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names]
    if isinstance(node, ast.Call) and ast.unparse(node.func) in _DYNAMIC_IMPORTS and node.args:
        first = node.args[0]
        return [first.value] if isinstance(first, ast.Constant) and isinstance(first.value, str) else []
    return []


def _private(module: str) -> bool:
    parts = module.split(".")
    return parts[0] == "airflow" and any(part.startswith("_") for part in parts[1:])


def test_the_scan_tells_private_airflow_modules_from_public_ones():
    tree = ast.parse("from airflow.sdk.definitions._internal.expandinput import MappedArgument\n"
                     "import airflow._shared.timezones\nfrom airflow.sdk import TaskGroup, XComArg\n"
                     "importlib.import_module('airflow.sdk._x')\nfrom ._private import y\n")
    found = [m for node in ast.walk(tree) for m in _imported(node) if _private(m)]
    assert found == ["airflow.sdk.definitions._internal.expandinput",
                     "airflow.sdk.definitions._internal.expandinput.MappedArgument",
                     "airflow._shared.timezones", "airflow.sdk._x"]


def test_no_module_of_the_package_imports_private_airflow_api():
    found = [
        f"{path.relative_to(PACKAGE.parent)}:{node.lineno} {module}"
        for path in sorted(PACKAGE.rglob("*.py"))
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
        for module in _imported(node)
        if _private(module)
    ]
    assert not found, found
