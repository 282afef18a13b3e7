"""Gate declarations: what to gate, and how tightly (SPEC sections 3 and 4).

A declaration names a metric (``metric_key``), the steps to select (``steps``), the band around
the baseline (``constraint``), whether a violation blocks (``enforce``) and why a known violation
is tolerated (``allowlist_reason``).  Declarations come from three sources, all validated by
:class:`~airflow_metric_gate.schemas.declarations.DeclarationSchema` with the same messages:

* Python objects in a DAG file (:func:`declare`, :func:`resolve_declarations`);
* YAML or JSON gates files (:func:`load_gates_file`);
* Python test files with top-level ``register_ci_gate(...)`` calls, parsed and never executed
  (:func:`parse_ci_gates`).

A field that is *omitted* is filled from the defaults table (:data:`GATE_DEFAULTS`, extended or
overridden per DAG or per gates file); a field written, even as ``None``, is never filled.

A coordinate's identity includes ``steps_key`` and ``constraint_key``: canonical JSON of the
literal as written (or of the defaults literal when the field was omitted).  Editing a literal or
a defaults entry therefore re-keys its coordinates and their baseline starts cold.
"""

from __future__ import annotations

import ast
import json
import os
import stat
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any

import yaml
from marshmallow import ValidationError

from airflow_metric_gate.errors import LocatedError
from airflow_metric_gate.limits import (
    MAX_CONSTRAINT_KEY_BYTES,
    MAX_METRIC_KEY_BYTES,
    MAX_NESTING_DEPTH,
    MAX_STEPS_KEY_BYTES,
    MAX_YAML_ALIASES,
    MAX_YAML_NODES,
    key_problem,
)
from airflow_metric_gate.schemas.declarations import (
    CONSTRAINT_KEYS,
    DOWN_KEYS,
    UP_KEYS,
    DeclarationSchema,
    GateDeclarationSchema,
    GatesFileSchema,
    load_defaults_table,
)
from airflow_metric_gate.schemas.messages import format_errors

__all__ = [
    "CONSTRAINT_KEYS",
    "DOWN_KEYS",
    "GATE_DEFAULTS",
    "UP_KEYS",
    "DeclarationError",
    "GateDeclaration",
    "canonical_key",
    "declare",
    "load_gates_file",
    "merge_defaults",
    "parse_ci_gates",
    "resolve_declarations",
]

#: The name of the call :func:`parse_ci_gates` reads from Python test files.
CI_GATE_CALL = "register_ci_gate"


def _entry(steps: str, **constraint: float) -> Mapping[str, Any]:
    return MappingProxyType({"steps": steps, "constraint": MappingProxyType(constraint)})


#: The built-in defaults table (read-only): metric key -> ``{"steps": ..., "constraint": {...}}``.
#: The TITO mismatch rates keep ``"last"`` (one per-session summary point per run) and set no
#: ``abs_floor_down``.  Extend or override it per DAG with ``defaults=`` or in a gates file.
GATE_DEFAULTS: Mapping[str, Mapping[str, Any]] = MappingProxyType(
    {
        "train/grad_norm": _entry("all", rel_up=0.5, abs_floor_up=0.1, rel_down=0.8, abs_floor_down=0.1),
        "train/ppo_kl": _entry("all", rel_up=0.5, abs_floor_up=0.02, rel_down=0.8, abs_floor_down=0.02),
        "train/train_rollout_logprob_abs_diff": _entry(
            "all", rel_up=0.5, abs_floor_up=0.02, rel_down=0.8, abs_floor_down=0.02
        ),
        "train/train_rollout_kl": _entry(
            "all", rel_up=0.5, abs_floor_up=0.02, rel_down=0.8, abs_floor_down=0.02
        ),
        "rollout/raw_reward": _entry("all", rel_up=0.5, abs_floor_up=0.05, rel_down=0.2, abs_floor_down=0.05),
        "rollout/tito_session_mismatch_rate/v1/assistant_text": _entry(
            "last", rel_up=1.0, abs_floor_up=0.1, rel_down=1.0
        ),
        "rollout/tito_session_mismatch_rate/v2/assistant_text": _entry(
            "last", rel_up=1.0, abs_floor_up=0.1, rel_down=1.0
        ),
    }
)


class DeclarationError(LocatedError):
    """A gate declaration or gates file is invalid; the message names where and which field.

    :param message: what is wrong (including which gate, when known).
    :param path: the file or source concerned, if any.
    :param line: the 1-based line number, if known.
    :param field: the declaration field or ``register_ci_gate`` argument concerned, if any.
    """


def canonical_key(literal: Any) -> str:
    """Return the canonical JSON of a literal: sorted keys, no spaces (SPEC 4).

    ``"all"`` gives ``"\\"all\\""``, ``[1, 0]`` gives ``"[1,0]"``, and ``1`` and ``1.0`` stay distinct.

    :param literal: a ``steps`` or ``constraint`` literal.
    """
    return json.dumps(literal, sort_keys=True, separators=(",", ":"), allow_nan=False)


@dataclass(frozen=True)
class GateDeclaration:
    """A resolved, validated gate declaration (immutable and hashable).

    Build it with :func:`declare`, :func:`resolve_declarations` or a gates file, not directly:
    the keys must be those of the literal as written.

    :param metric_key: the metric to gate.
    :param steps: ``"last"``, ``"all"`` or a tuple of steps in written order.
    :param constraint: all four band parameters; keys not written are ``0.0``.
    :param steps_key: canonical JSON of the ``steps`` literal as written (or of the defaults literal).
    :param constraint_key: canonical JSON of the ``constraint`` literal as written (or of the
        defaults literal); parameters not written are not in it.
    :param enforce: whether a FAIL or ERROR of this gate blocks.
    :param allowlist_reason: why a violation of this gate is tolerated, if it is.
    :param source: where the declaration came from (``"gates.yaml:3"``), for messages only.
    :param min_failing_steps: opt-in persistence rule: the declaration's FAIL results count only when
        at least this many of its selected steps (or all of them, when fewer) leave the band in the
        run; 1 (the default) is the plain rule.
    """

    metric_key: str
    steps: str | tuple[int, ...]
    constraint: Mapping[str, float] = field(hash=False)
    steps_key: str
    constraint_key: str
    enforce: bool = False
    allowlist_reason: str | None = None
    source: str | None = field(default=None, compare=False)
    min_failing_steps: int = 1

    def __post_init__(self) -> None:
        if not isinstance(self.steps, str):
            object.__setattr__(self, "steps", tuple(self.steps))
        filled = {k: float(self.constraint.get(k, 0.0)) for k in CONSTRAINT_KEYS}
        object.__setattr__(self, "constraint", filled)

    @property
    def coordinate(self) -> tuple[str, str, str]:
        """``(metric_key, steps_key, constraint_key)``: the declaration part of a stored value's identity."""
        return (self.metric_key, self.steps_key, self.constraint_key)

    def to_dict(self) -> dict[str, Any]:
        """Return a JSON-safe dict that :meth:`from_dict` turns back into an equal declaration."""
        out = {
            "metric_key": self.metric_key,
            "steps": self.steps if isinstance(self.steps, str) else list(self.steps),
            "constraint": dict(self.constraint),
            "steps_key": self.steps_key,
            "constraint_key": self.constraint_key,
            "enforce": self.enforce,
            "allowlist_reason": self.allowlist_reason,
            "source": self.source,
        }
        if self.min_failing_steps != 1:  # written only when set, so default declarations read as before
            out["min_failing_steps"] = self.min_failing_steps
        return out

    def summary(self) -> dict[str, Any]:
        """Return the declaration as it is stored with a run (what evaluation and replay judge with)."""
        out = {
            "metric_key": self.metric_key,
            "steps_key": self.steps_key,
            "constraint_key": self.constraint_key,
            "constraint": dict(self.constraint),
            "enforce": bool(self.enforce),
            "allowlist_reason": self.allowlist_reason,
        }
        if self.min_failing_steps != 1:  # opt-in rules are stored only when switched on
            out["min_failing_steps"] = self.min_failing_steps
        return out

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> GateDeclaration:
        """Rebuild a declaration from :meth:`to_dict` output.

        :param data: the dict, e.g. read back from XCom.
        :raises DeclarationError: ``data`` is not a serialized declaration.
        """
        try:
            loaded = GateDeclarationSchema().load(data)
        except ValidationError as err:
            message = f"not a serialized gate declaration: {format_errors(err.messages)}"
            raise DeclarationError(message) from None
        return cls(**loaded)


# -- resolution ------------------------------------------------------------------------------------


def _plain(value: Any) -> Any:
    if isinstance(value, Mapping):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


def _merge(base: dict[str, dict[str, Any]], extra: Mapping[str, Any] | None, where: str | None) -> None:
    if extra is None:
        return
    try:
        table = load_defaults_table(extra)
    except ValidationError as err:
        message = f"defaults: {format_errors(err.messages)}"
        raise DeclarationError(message, path=where, field="defaults") from None
    for metric, entry in table.items():
        base.setdefault(metric, {}).update(_plain(entry))


def merge_defaults(*extras: Mapping[str, Any] | None, where: str | None = None) -> dict[str, dict[str, Any]]:
    """Return the built-in defaults table extended or overridden by ``extras``, as plain dicts.

    The one place defaults are merged (SPEC 3).  Each entry of an extra table overrides the entry
    of its metric so far field by field: an entry setting only ``steps`` keeps the ``constraint``
    it had.  A ``constraint`` is replaced as a whole, never merged key by key.  Later tables win.

    :param extras: tables of metric key -> ``{"steps": ..., "constraint": {...}}`` (either
        optional); ``None`` is skipped.
    :param where: the file or source the tables come from, for messages.
    :raises DeclarationError: an entry is invalid.
    """
    table = _plain(GATE_DEFAULTS)
    for extra in extras:
        _merge(table, extra, where)
    return table


def _label(index: int | None, item: Any) -> str:
    metric = item.get("metric_key") if isinstance(item, Mapping) else None
    name = f" ({metric})" if isinstance(metric, str) and metric else ""
    return f"gate {index}{name}" if index is not None else f"gate{name}"


def _first_field(messages: Any) -> str | None:
    if isinstance(messages, Mapping):
        for key in messages:
            if key != "_schema":
                return str(key)
    return None


def _build(
    item: Any,
    schema: DeclarationSchema,
    *,
    index: int | None,
    path: str | None,
    line: int | None,
) -> GateDeclaration:
    try:
        loaded = schema.load(item)
    except ValidationError as err:
        raise DeclarationError(
            f"{_label(index, item)}: {format_errors(err.messages)}",
            path=path,
            line=line,
            field=_first_field(err.messages),
        ) from None
    steps, constraint = loaded["steps"], loaded["constraint"]
    keys = (
        ("metric_key", loaded["metric_key"], MAX_METRIC_KEY_BYTES),
        ("steps", canonical_key(steps), MAX_STEPS_KEY_BYTES),
        ("constraint", canonical_key(constraint), MAX_CONSTRAINT_KEY_BYTES),
    )
    for name, key, limit in keys:
        problem = key_problem(key, limit)
        if problem:
            what = "metric_key" if name == "metric_key" else f"{name} (as the coordinate key {name}_key)"
            raise DeclarationError(
                f"{_label(index, item)}: field {what} {problem}", path=path, line=line, field=name
            )
    if line is not None:
        source = f"{path}:{line}"
    elif path is not None:
        source = f"{path}: gate {index}" if index is not None else path
    else:
        source = None
    return GateDeclaration(
        metric_key=loaded["metric_key"],
        steps=steps,
        constraint=constraint,
        steps_key=canonical_key(steps),
        constraint_key=canonical_key(constraint),
        enforce=loaded["enforce"],
        allowlist_reason=loaded["allowlist_reason"],
        source=source,
        min_failing_steps=loaded["min_failing_steps"],
    )


class _Omitted:
    def __repr__(self) -> str:
        return "<omitted>"


_OMITTED: Any = _Omitted()


def declare(
    metric_key: str,
    *,
    steps: Any = _OMITTED,
    constraint: Any = _OMITTED,
    enforce: bool = False,
    allowlist_reason: str | None = None,
    defaults: Mapping[str, Any] | None = None,
    source: str | None = None,
    min_failing_steps: int = 1,
) -> GateDeclaration:
    """Declare one gate in Python.

    :param metric_key: the metric to gate.
    :param steps: ``"last"``, ``"all"`` or a non-empty list of unique steps >= 0; omit it to use
        the defaults table (passing ``None`` is an error, not an omission).
    :param constraint: a dict with keys among ``rel_up``, ``abs_floor_up``, ``rel_down``,
        ``abs_floor_down``, at least one per side, values finite and >= 0; omit it to use the
        defaults table.
    :param enforce: whether a FAIL or ERROR of this gate blocks.
    :param allowlist_reason: why a violation of this gate is tolerated, if it is.
    :param defaults: entries extending or overriding :data:`GATE_DEFAULTS`.
    :param source: where the declaration is written, used in messages.
    :param min_failing_steps: opt-in persistence rule (see :class:`GateDeclaration`).
    :raises DeclarationError: the declaration is invalid.
    """
    item: dict[str, Any] = {"metric_key": metric_key}
    item.update(enforce=enforce, allowlist_reason=allowlist_reason)
    if min_failing_steps != 1:
        item["min_failing_steps"] = min_failing_steps
    if steps is not _OMITTED:
        item["steps"] = steps
    if constraint is not _OMITTED:
        item["constraint"] = constraint
    schema = DeclarationSchema(defaults=merge_defaults(defaults))
    return _build(item, schema, index=None, path=source, line=None)


def _resolve(
    items: Iterable[Any],
    table: Mapping[str, Mapping[str, Any]],
    *,
    path: str | None,
    lines: list[int] | None = None,
) -> list[GateDeclaration]:
    schema = DeclarationSchema(defaults=table)
    resolved: list[GateDeclaration] = []
    for index, item in enumerate(items, 1):
        line = lines[index - 1] if lines is not None and index - 1 < len(lines) else None
        if isinstance(item, GateDeclaration):
            declaration = item
        else:
            declaration = _build(item, schema, index=index, path=path, line=line)
        resolved.append(declaration)
    return resolved


def _place(declaration: GateDeclaration) -> str:
    return declaration.source or "a declaration given without a source"


def collapse_duplicates(declarations: Iterable[GateDeclaration]) -> tuple[list[GateDeclaration], list[str]]:
    """Collapse declarations of the same coordinate (metric, steps and constraint literals) into one.

    The one check of a coordinate declared twice (SPEC 4), whatever the declarations came from
    (gates files, DAG files, both): the first declaration is kept, each later one with the same
    ``enforce``, ``allowlist_reason`` and ``min_failing_steps`` is dropped with a warning naming
    both places; a file the reference gate accepts is never rejected for it.

    :param declarations: resolved declarations, in declaration order.
    :return: the declarations without duplicates, in first-seen order, and the warnings.
    :raises DeclarationError: two declarations of one coordinate differ in ``enforce``,
        ``allowlist_reason`` or ``min_failing_steps`` (bad input: never retried); the message
        names both places.
    """
    kept: dict[tuple[str, str, str], GateDeclaration] = {}
    warnings: list[str] = []
    for declaration in declarations:
        first = kept.setdefault(declaration.coordinate, declaration)
        if first is declaration:
            continue
        what = (
            f"gate {declaration.metric_key!r} with steps {declaration.steps_key} and constraint "
            f"{declaration.constraint_key}"
        )
        for name in ("enforce", "allowlist_reason", "min_failing_steps"):
            a, b = getattr(first, name), getattr(declaration, name)
            if a != b:
                raise DeclarationError(
                    f"{what} is declared twice with different {name}: {a!r} at {_place(first)}, {b!r} at "
                    f"{_place(declaration)}; declare it once, or make them agree",
                    field=name,
                )
        warnings.append(f"{what} is declared twice, at {_place(first)} and at {_place(declaration)}; "
                        "it is gated once")
    return list(kept.values()), warnings


def resolve_declarations(
    items: Iterable[Mapping[str, Any] | GateDeclaration],
    *,
    defaults: Mapping[str, Any] | None = None,
    source: str | None = None,
) -> list[GateDeclaration]:
    """Validate declaration mappings (as written in a DAG file) and resolve them.

    :param items: mappings with ``metric_key`` and optionally ``steps``, ``constraint``,
        ``enforce``, ``allowlist_reason``; :class:`GateDeclaration` objects pass through.
    :param defaults: entries extending or overriding :data:`GATE_DEFAULTS`.
    :param source: where the declarations are written (a DAG and task id, a file), for messages.
    :raises DeclarationError: naming the first invalid gate (1-based) and field.  A coordinate
        declared twice is kept twice here; :func:`collapse_duplicates` decides.
    """
    return _resolve(items, merge_defaults(defaults, where=source), path=source)


# -- gates files -----------------------------------------------------------------------------------


def _open_path(path: Any) -> Any:
    if isinstance(path, str) and "://" in path:
        from upath import UPath

        return UPath(path)
    if isinstance(path, (str, os.PathLike)) and not hasattr(path, "read_text"):
        return Path(path)
    return path


def _refuse_special_file(path: Any, name: str) -> None:
    """Refuse a local FIFO, socket or device before opening it (a FIFO would block forever)."""
    if not isinstance(path, Path) or hasattr(path, "protocol"):
        return
    try:
        mode = path.stat().st_mode
    except OSError:
        return  # reading reports it
    if not stat.S_ISREG(mode):
        kind = "a directory" if stat.S_ISDIR(mode) else "a FIFO, socket or device"
        raise DeclarationError(f"not a regular file ({kind}); a gates file is a regular file", path=name)


def _read_text(path: Any, name: str) -> str:
    try:
        opened = _open_path(path)
        _refuse_special_file(opened, name)
        return opened.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise DeclarationError("no such gates file", path=name) from None
    except (OSError, UnicodeDecodeError) as err:
        raise DeclarationError(f"cannot read the gates file: {err}", path=name) from None


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
        data, lines = _load_yaml(_read_text(path, name), name)
    elif suffix == ".json":
        data, lines = _load_json(_read_text(path, name), name)
    else:
        raise DeclarationError("unsupported gates file type (expected .yaml, .yml, .json or .py)", path=name)
    if data is None:
        raise DeclarationError("the gates file is empty (write `gates: []` to declare no gate)", path=name)
    if isinstance(data, list):
        data = {"gates": data}
    try:
        loaded = GatesFileSchema().load(data)
    except ValidationError as err:
        field_name = _first_field(err.messages)
        raise DeclarationError(format_errors(err.messages), path=name, field=field_name) from None
    table = merge_defaults(defaults, loaded["defaults"], where=name)
    return _resolve(loaded["gates"], table, path=name, lines=lines)


# -- register_ci_gate(...) in Python test files --------------------------------------------------

_LITERALS = "constants, negative numbers, lists, and dicts with string keys"


class _NotLiteral(Exception):
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
        if isinstance(operand, ast.Constant) and type(operand.value) in (int, float):
            return -operand.value
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
    text = _read_text(path, name)
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
    return _resolve(items, merge_defaults(defaults, where=name), path=name, lines=[call.lineno for call in calls])
