"""Reading ``register_ci_gate(...)`` declarations from Python test files, never executing them (SPEC 3)."""

from __future__ import annotations

import ast
from collections.abc import Mapping
from typing import Any

from airflow_metric_gate.declarations.model import DeclarationError, GateDeclaration, merge_defaults
from airflow_metric_gate.declarations.reading import read_text
from airflow_metric_gate.declarations.resolution import resolve_items
from airflow_metric_gate.errors import BadInputError

__all__ = ["CI_GATE_CALL", "parse_ci_gates"]

#: The name of the call :func:`parse_ci_gates` reads from Python test files.
CI_GATE_CALL = "register_ci_gate"

_LITERALS = "constants, negative numbers, lists, and dicts with string keys"


class _NotLiteral(BadInputError):
    def __init__(self, message: str, node: ast.AST) -> None:
        super().__init__(message)
        self.message = message
        self.node = node


def _literal(node: ast.AST) -> Any:
    """Evaluate a literal expression without executing anything."""
    if isinstance(node, ast.Constant):
        if node.value is None or isinstance(node.value, (str, int, float, bool)):
            return node.value
    elif isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        operand = node.operand
        number = operand.value if isinstance(operand, ast.Constant) else None
        if isinstance(number, (int, float)) and not isinstance(number, bool):
            return -number
    elif isinstance(node, ast.List):
        return [_literal(item) for item in node.elts]
    elif isinstance(node, ast.Dict):
        result: dict[str, Any] = {}
        for key, value in zip(node.keys, node.values, strict=True):
            if key is None:
                raise _NotLiteral(f"`**` expansion in a dict is not a literal; allowed: {_LITERALS}", value)
            if not (isinstance(key, ast.Constant) and isinstance(key.value, str)):
                raise _NotLiteral(f"dict key `{ast.unparse(key)}` is not a string", key)
            if key.value in result:
                raise _NotLiteral(f"dict key {key.value!r} appears twice", key)
            result[key.value] = _literal(value)
        return result
    raise _NotLiteral(f"`{ast.unparse(node)}` is not a literal; allowed: {_LITERALS}", node)


def _ci_gate_calls(tree: ast.Module) -> list[ast.Call]:
    calls = []
    for statement in tree.body:
        # Only bare expression statements count: `_ = register_ci_gate(...)` and annotated
        # assignments are ignored, as the reference gate ignores them.
        value = statement.value if isinstance(statement, ast.Expr) else None
        if (
            isinstance(value, ast.Call)
            and isinstance(value.func, ast.Name)
            and value.func.id == CI_GATE_CALL
        ):
            calls.append(value)
    return calls


def _call_arguments(call: ast.Call, name: str) -> dict[str, Any]:
    if call.args:
        arg = call.args[0]
        raise DeclarationError(
            f"{CI_GATE_CALL}(...): positional argument 1 (`{ast.unparse(arg)}`): arguments must be keywords "
            "(metric_key=..., steps=..., constraint=..., enforce=..., allowlist_reason=...)",
            path=name,
            line=arg.lineno,
        )
    arguments: dict[str, Any] = {}
    for keyword in call.keywords:
        if keyword.arg is None:
            raise DeclarationError(
                f"{CI_GATE_CALL}(...): `**{ast.unparse(keyword.value)}`: arguments must be written "
                "one by one as keyword=literal",
                path=name,
                line=keyword.value.lineno,
            )
        if keyword.arg in arguments:
            raise DeclarationError(
                f"{CI_GATE_CALL}(...) argument {keyword.arg!r}: given twice",
                path=name,
                line=keyword.lineno,
                field=keyword.arg,
            )
        try:
            arguments[keyword.arg] = _literal(keyword.value)
        except _NotLiteral as err:
            raise DeclarationError(
                f"{CI_GATE_CALL}(...) argument {keyword.arg!r}: {err.message}",
                path=name,
                line=getattr(err.node, "lineno", keyword.lineno),
                field=keyword.arg,
            ) from None
    return arguments


def parse_ci_gates(path: Any, *, defaults: Mapping[str, Any] | None = None) -> list[GateDeclaration]:
    """Read the ``register_ci_gate(...)`` declarations of a Python test file, without executing it.

    Only top-level calls of the bare name ``register_ci_gate`` written as expression statements
    count; assigned calls (``_ = register_ci_gate(...)``, annotated assignments), calls inside
    functions, classes or conditionals and attribute calls such as ``gates.register_ci_gate(...)``
    are ignored.  Arguments must be keywords with literal
    values: constants, negative numbers, lists, and dicts with string keys and no key twice.

    :param path: the Python file: a path, a URI string, or a pathlib-like object.
    :param defaults: entries extending or overriding :data:`GATE_DEFAULTS`.
    :raises DeclarationError: naming the file, the line and the argument.
    """
    name = str(path)
    text = read_text(path, name, python=True)
    try:
        tree = ast.parse(text, filename=name)
    except SyntaxError as err:
        raise DeclarationError(f"not valid Python: {err.msg}", path=name, line=err.lineno) from None
    except (RecursionError, MemoryError):
        raise DeclarationError("not valid Python: nested too deeply for the Python parser", path=name) from None
    calls = _ci_gate_calls(tree)
    try:
        items = [_call_arguments(call, name) for call in calls]
    except RecursionError:
        raise DeclarationError(f"{CI_GATE_CALL}(...): a literal nested too deeply", path=name) from None
    return resolve_items(items, merge_defaults(defaults, where=name), path=name, lines=[call.lineno for call in calls])
