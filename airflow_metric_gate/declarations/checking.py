"""Checking declarations before a night runs: when a DAG file is parsed, and in CI (``metric-gate check``).

A DAG file is parsed again and again, so the check of a local gates file is cheap: the file is
read and resolved once per version of it (its size and modification time), and a path that is
templated or on object storage is never read here (the night's task checks it, as always).
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence
from functools import lru_cache
from typing import Any, TypeGuard

from airflow_metric_gate.declarations.files import load_gates_file
from airflow_metric_gate.declarations.model import GateDeclaration
from airflow_metric_gate.declarations.resolution import collapse_duplicates, resolve_declarations
from airflow_metric_gate.paths import location_text

__all__ = ["check_declarations", "check_gates_file", "is_local_literal_path"]

_TEMPLATE_MARKS = ("{{", "{%", "{#")


def is_local_literal_path(path: object) -> TypeGuard[str]:
    """Whether ``path`` names a local file as written: a string, not templated, not a URI.

    :param path: a ``gates_file`` argument as given to an operator.
    """
    return (
        isinstance(path, str) and bool(path.strip()) and "://" not in path
        and not any(mark in path for mark in _TEMPLATE_MARKS)
    )


@lru_cache(maxsize=64)
def _load(path: str, version: tuple[int, int], defaults_json: str) -> tuple[GateDeclaration, ...]:
    defaults = json.loads(defaults_json) if defaults_json else None
    return tuple(load_gates_file(path, defaults=defaults))


def check_gates_file(
    path: str | os.PathLike, *, defaults: Mapping[str, Mapping[str, Any]] | None = None
) -> list[GateDeclaration]:
    """Read and resolve a local gates file (cached per version of the file), raising what the night would.

    :param path: the gates file (YAML, JSON or Python with ``register_ci_gate`` calls).
    :param defaults: entries extending or overriding the defaults table.
    :return: its declarations.
    :raises DeclarationError: naming the file, the line and the field, as the night's task would.
    """
    name = location_text(path)
    try:
        info = os.stat(name)
        version = (info.st_mtime_ns, info.st_size)
    except OSError:  # not cached: load_gates_file names the problem
        return load_gates_file(name, defaults=defaults)
    try:
        defaults_json = json.dumps(defaults, sort_keys=True) if defaults else ""
    except (TypeError, ValueError):
        return load_gates_file(name, defaults=defaults)
    return list(_load(name, version, defaults_json))


def check_declarations(
    *,
    gates_file: str | None = None,
    gates: Sequence[Mapping[str, Any] | GateDeclaration] | None = None,
    defaults: Mapping[str, Mapping[str, Any]] | None = None,
    relative_to: str | None = None,
    source: str | None = None,
) -> list[str]:
    """Check what a ``SelectStepsOperator`` will resolve, as far as it is known when the DAG is parsed.

    A ``gates_file`` that is a local path as written (:func:`is_local_literal_path`) and exists is
    read; a templated one, a URI, or one not found on this machine is left to the night's task.
    ``gates`` written in the DAG file are resolved too, and both together are checked for a
    coordinate declared twice with different settings.

    :param gates_file: the operator's ``gates_file``.
    :param gates: the operator's ``gates``.
    :param defaults: the operator's ``defaults``.
    :param relative_to: the folder a relative ``gates_file`` starts at (the DAG file's).
    :param source: names inline ``gates`` in messages.
    :return: the warnings the night would log (a coordinate declared twice, an empty metric key).
    :raises DeclarationError: a declaration is invalid, naming file, line and field.
    """
    found: list[GateDeclaration] = []
    if is_local_literal_path(gates_file):
        path = gates_file if os.path.isabs(gates_file) or relative_to is None else os.path.join(relative_to, gates_file)
        if os.path.isfile(path):
            found.extend(check_gates_file(path, defaults=defaults))
    if gates is not None:
        found.extend(resolve_declarations(gates, defaults=defaults, source=source))
    _, warnings = collapse_duplicates(found)
    return warnings
