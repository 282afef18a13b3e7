"""Docstrings agree with the signatures: each ``:param x:`` names a parameter, and public ones are all documented.

Read from the source (nothing is imported): a function's ``:param`` lines, or for ``__init__`` its
class's; a dataclass or a named tuple documents its fields in its class docstring.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

import airflow_metric_gate

PACKAGE = Path(airflow_metric_gate.__file__).parent
ROOT = PACKAGE.parent
_PARAM = re.compile(r"^\s*:param\s+\*{0,2}(\w+)\s*:", re.M)
_FUNCTIONS = (ast.FunctionDef, ast.AsyncFunctionDef)


def _documented(node: ast.AST) -> list[str]:
    return _PARAM.findall(ast.get_docstring(node) or "")  # type: ignore[arg-type]


def _parameters(function: ast.FunctionDef | ast.AsyncFunctionDef) -> list[str]:
    args = function.args
    names = [a.arg for a in (*args.posonlyargs, *args.args, *args.kwonlyargs)]
    names += [a.arg for a in (args.vararg, args.kwarg) if a is not None]
    return [n for n in names if n not in ("self", "cls")]


def _fields(cls: ast.ClassDef) -> list[str]:
    return [s.target.id for s in cls.body if isinstance(s, ast.AnnAssign) and isinstance(s.target, ast.Name)]


def _is_record(cls: ast.ClassDef) -> bool:
    """A dataclass or a named tuple: its fields are its parameters."""
    names = {ast.unparse(d.func if isinstance(d, ast.Call) else d) for d in cls.decorator_list}
    return bool(names & {"dataclass", "dataclasses.dataclass"}) or any(
        ast.unparse(b) in ("NamedTuple", "typing.NamedTuple") for b in cls.bases
    )


def _public(path: Path) -> bool:
    return not any(part.startswith("_") and part != "__init__.py" for part in path.relative_to(PACKAGE).parts)


def _overload(function: ast.FunctionDef | ast.AsyncFunctionDef) -> bool:
    return any(ast.unparse(d) in ("overload", "typing.overload") for d in function.decorator_list)


def _checks() -> Iterator[tuple[str, list[str], list[str], bool]]:
    """Each documented thing: where, the names its docstring documents, its parameters, whether all must be."""
    for path in sorted(PACKAGE.rglob("*.py")):
        where = str(path.relative_to(ROOT))
        tree = ast.parse(path.read_text(encoding="utf-8"))
        yield from _scope(tree, where, _public(path))


def _scope(node: ast.AST, where: str, public: bool) -> Iterator[tuple[str, list[str], list[str], bool]]:
    for child in ast.iter_child_nodes(node):
        if isinstance(child, ast.ClassDef):
            init = next((c for c in child.body if isinstance(c, _FUNCTIONS) and c.name == "__init__"), None)
            class_public = public and not child.name.startswith("_")
            if init is None and _is_record(child):
                yield f"{where}:{child.lineno} {child.name}", _documented(child), _fields(child), False
            elif init is not None:
                yield (f"{where}:{init.lineno} {child.name}.__init__", _documented(child) + _documented(init),
                       _parameters(init), class_public)
            yield from _scope(child, where, class_public)
        elif isinstance(child, _FUNCTIONS) and child.name != "__init__" and not _overload(child):
            must = public and not child.name.startswith("_")
            yield f"{where}:{child.lineno} {child.name}", _documented(child), _parameters(child), must


CHECKS = list(_checks())


def test_there_are_docstrings_to_check() -> None:
    assert sum(bool(documented) for _, documented, _, _ in CHECKS) > 200


def test_every_param_line_names_a_parameter() -> None:
    stale = [f"{where}: :param {name}: is no parameter"
             for where, documented, parameters, _ in CHECKS for name in documented if name not in parameters]
    assert not stale, "\n".join(stale)


def test_every_parameter_of_a_public_function_is_documented() -> None:
    missing = [f"{where}: {name}"
               for where, documented, parameters, must in CHECKS if must
               for name in parameters if name not in documented and not name.startswith("_")]
    assert not missing, "no :param line for\n" + "\n".join(missing)


@pytest.mark.parametrize(
    ("source", "documented"),
    [('def f(a, *, b):\n    """Do.\n\n    :param a: one.\n    :param b: two.\n    """\n', ["a", "b"]),
     ('def f(**kwargs):\n    """Do.\n\n    :param kwargs: passed on.\n    """\n', ["kwargs"])],
)
def test_the_scan_reads_param_lines(source, documented) -> None:
    function = ast.parse(source).body[0]
    assert _documented(function) == documented == _parameters(function)  # type: ignore[arg-type]
