"""YAML and JSON gates files, read with a loader that bounds what a small file may cost (SPEC 3)."""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from typing import Any

import yaml
from marshmallow import ValidationError

from airflow_metric_gate.declarations.ci_gates import parse_ci_gates
from airflow_metric_gate.declarations.model import DeclarationError, GateDeclaration, merge_defaults
from airflow_metric_gate.declarations.reading import read_text
from airflow_metric_gate.declarations.resolution import resolve_items
from airflow_metric_gate.limits import MAX_NESTING_DEPTH, MAX_YAML_ALIASES, MAX_YAML_NODES
from airflow_metric_gate.schemas.declarations import GatesFileSchema
from airflow_metric_gate.schemas.messages import first_field, format_errors

__all__ = ["load_gates_file"]


def _check_duplicate_keys(node: yaml.Node, name: str) -> None:
    """Reject a YAML mapping that repeats a key (``yaml.safe_load`` would silently keep the last)."""
    if isinstance(node, yaml.MappingNode):
        seen: set[Any] = set()
        for key, value in node.value:
            if isinstance(key, yaml.ScalarNode):
                if key.value in seen:
                    line = key.start_mark.line + 1
                    raise DeclarationError(f"key {key.value!r} appears twice", path=name, line=line)
                seen.add(key.value)
            _check_duplicate_keys(value, name)
    elif isinstance(node, yaml.SequenceNode):
        for item in node.value:
            _check_duplicate_keys(item, name)


def _gate_lines(node: yaml.Node | None) -> list[int] | None:
    """Return the 1-based line of each gate of a composed YAML/JSON document, when it has that shape."""
    if isinstance(node, yaml.MappingNode):
        for key, value in node.value:
            if isinstance(key, yaml.ScalarNode) and key.value == "gates":
                node = value
                break
        else:
            return None
    if isinstance(node, yaml.SequenceNode):
        return [item.start_mark.line + 1 for item in node.value]
    return None


class _BoundedLoader(yaml.SafeLoader):
    """``yaml.SafeLoader`` that refuses what could make a small file expensive to load.

    Aliases to mappings and lists are how a 400-byte file expands to billions of items ("billion
    laughs"): the document may hold at most :data:`MAX_YAML_NODES` nodes with its aliases expanded,
    use at most :data:`MAX_YAML_ALIASES` aliases, and no alias may refer to a collection that holds
    it.  Collections nest at most :data:`MAX_NESTING_DEPTH` deep.  Each refusal names the line.
    """

    def __init__(self, stream: str, name: str) -> None:
        super().__init__(stream)
        self.name = name
        self.depth = 0
        self.aliases = 0
        self.nodes = 0  # nodes so far, aliases expanded
        self.sizes: dict[int, int] = {}  # id(node) -> expanded size, for finished nodes

    def _size(self, node: yaml.Node) -> int:
        """Expanded size of a finished node (its aliased parts counted every time they are used)."""
        size = self.sizes.get(id(node))
        if size is None:
            if isinstance(node, yaml.SequenceNode):
                size = 1 + sum(self._size(child) for child in node.value)
            elif isinstance(node, yaml.MappingNode):
                size = 1 + sum(self._size(k) + self._size(v) for k, v in node.value)
            else:
                size = 1
            self.sizes[id(node)] = size
        return size

    def _refuse(self, message: str, mark: Any) -> DeclarationError:
        return DeclarationError(message, path=self.name, line=mark.line + 1 if mark is not None else None)

    def compose_node(self, parent: Any, index: Any) -> Any:
        if self.check_event(yaml.AliasEvent):
            event = self.peek_event()
            target = self.anchors.get(event.anchor)
            if target is not None:
                if not isinstance(target, yaml.ScalarNode) and id(target) not in self.sizes:
                    raise self._refuse(
                        f"alias *{event.anchor} refers to a mapping or list that holds the alias itself",
                        event.start_mark,
                    )
                self.aliases += 1
                if self.aliases > MAX_YAML_ALIASES:
                    raise self._refuse(f"more than {MAX_YAML_ALIASES} aliases", event.start_mark)
                self.nodes += self._size(target)
                if self.nodes > MAX_YAML_NODES:
                    raise self._refuse(
                        f"alias *{event.anchor} expands the file to more than {MAX_YAML_NODES} nodes", event.start_mark
                    )
            return super().compose_node(parent, index)
        self.depth += 1
        try:
            if self.depth > MAX_NESTING_DEPTH:
                raise self._refuse(f"nested deeper than {MAX_NESTING_DEPTH} levels", self.peek_event().start_mark)
            self.nodes += 1
            node = super().compose_node(parent, index)
        finally:
            self.depth -= 1
        if node is not None:
            self._size(node)  # finished: aliases to it may now be expanded
        return node


def _compose(text: str, name: str) -> tuple[yaml.Node | None, _BoundedLoader]:
    loader = _BoundedLoader(text, name)
    try:
        return loader.get_single_node(), loader
    finally:
        loader.dispose()


def _load_yaml(text: str, name: str) -> tuple[Any, list[int] | None]:
    try:
        node, loader = _compose(text, name)
        data = None
        if node is not None:
            _check_duplicate_keys(node, name)
            data = loader.construct_document(node)
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        problem = getattr(err, "problem", None) or str(err)
        raise DeclarationError(
            f"not valid YAML: {problem}", path=name, line=mark.line + 1 if mark is not None else None
        ) from None
    return data, _gate_lines(node)


def _no_duplicate_pairs(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    result: dict[str, Any] = {}
    for key, value in pairs:
        if key in result:
            raise ValueError(f"key {key!r} appears twice")
        result[key] = value
    return result


def _load_json(text: str, name: str) -> tuple[Any, list[int] | None]:
    try:
        data = json.loads(text, object_pairs_hook=_no_duplicate_pairs)
    except json.JSONDecodeError as err:
        raise DeclarationError(f"not valid JSON: {err.msg}", path=name, line=err.lineno) from None
    except ValueError as err:
        raise DeclarationError(f"not valid JSON: {err}", path=name) from None
    except RecursionError:
        raise DeclarationError(f"not valid JSON: nested deeper than {MAX_NESTING_DEPTH} levels", path=name) from None
    try:  # JSON is (almost always) YAML: borrow the YAML composer for the line of each gate (and the depth limit)
        lines = _gate_lines(_compose(text, name)[0])
    except yaml.YAMLError:
        lines = None
        if _depth(data) > MAX_NESTING_DEPTH:
            raise DeclarationError(f"nested deeper than {MAX_NESTING_DEPTH} levels", path=name) from None
    return data, lines


def _depth(value: Any) -> int:
    """Nesting depth of parsed JSON (a scalar is 0), without recursion."""
    deepest, stack = 0, [(value, 1)]
    while stack:
        item, level = stack.pop()
        children = item.values() if isinstance(item, dict) else item if isinstance(item, list) else None
        if children is not None:
            deepest = max(deepest, level)
            stack.extend((child, level + 1) for child in children)
    return deepest


def load_gates_file(path: Any, *, defaults: Mapping[str, Any] | None = None) -> list[GateDeclaration]:
    """Read and resolve a gates file, by extension.

    ``.yaml``/``.yml`` and ``.json`` files hold either a list of declaration mappings, or a
    mapping with ``gates`` (that list) and optionally ``defaults`` (entries extending or
    overriding the defaults table, field by field).  ``.py`` files are read by
    :func:`parse_ci_gates`.

    :param path: the file: a path, a URI string, or a pathlib-like object.
    :param defaults: entries extending or overriding :data:`GATE_DEFAULTS`, beneath the file's
        own ``defaults``.
    :raises DeclarationError: naming the file, the line (or gate number) and the field.
    """
    name = str(path)
    suffix = os.path.splitext(name)[1].lower()
    if suffix == ".py":
        return parse_ci_gates(path, defaults=defaults)
    if suffix in (".yaml", ".yml"):
        data, lines = _load_yaml(read_text(path, name), name)
    elif suffix == ".json":
        data, lines = _load_json(read_text(path, name), name)
    else:
        raise DeclarationError("unsupported gates file type (expected .yaml, .yml, .json or .py)", path=name)
    if data is None:
        raise DeclarationError("the gates file is empty (write `gates: []` to declare no gate)", path=name)
    if isinstance(data, list):
        data = {"gates": data}
    try:
        loaded = GatesFileSchema().load(data)
    except ValidationError as err:
        field_name = first_field(err.messages)
        raise DeclarationError(format_errors(err.messages), path=name, field=field_name) from None
    table = merge_defaults(defaults, loaded["defaults"], where=name)
    return resolve_items(loaded["gates"], table, path=name, lines=lines, policy=loaded["policy"])
