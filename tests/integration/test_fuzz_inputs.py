"""Fuzzing the record reader and the gates-file readers through ``metric-gate run``, in process.

Whatever the record or the gates file holds, the command exits 0, 1 or 2 (never 4, never a
traceback), and an exit 2 leaves the store exactly as empty as it was.  The examples are derived
from a fixed seed (``derandomize``) and bounded, so the run is the same on every machine and fast
enough for CI.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import tempfile

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from airflow_metric_gate.cli import main
from airflow_metric_gate.store import open_store

pytestmark = pytest.mark.slow

FUZZ = settings(
    max_examples=60,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)

GATES_YAML = """\
gates:
  - metric_key: m
    steps: all
    constraint: {rel_up: 0.5, rel_down: 0.5}
  - metric_key: n
    steps: last
    constraint: {rel_up: 0.5, rel_down: 0.5}
  - metric_key: m
    steps: [0, 1, 2]
    constraint: {rel_up: 0.5, rel_down: 0.5}
"""
RECORD = '{"metric": "m", "series": [[0, 1.0], [1, 1.5], [2, 2.0]]}\n{"metric": "n", "series": [[5, 0.5]]}\n'

names = st.one_of(st.sampled_from(["m", "n", "", "step"]), st.text(max_size=12))
steps = st.one_of(
    st.integers(min_value=-2, max_value=5),
    st.sampled_from([2**31, 2**63 - 1, 2**63, 2**64, -(2**63)]),
    st.none(),
    st.booleans(),
    st.floats(allow_nan=True),
    st.text(max_size=3),
)
scalars = st.one_of(
    st.floats(allow_nan=True, allow_infinity=True),
    st.integers(),
    st.sampled_from([10**400, -(10**400), "NaN", "Infinity", "-Infinity"]),
    st.none(),
    st.booleans(),
    st.text(max_size=6),
)
values = st.recursive(scalars, lambda inner: st.lists(inner, max_size=3) | st.dictionaries(names, inner, max_size=3),
                      max_leaves=8)
points = st.one_of(st.tuples(steps, values).map(list), st.lists(values, max_size=3), values)
series_line = st.fixed_dictionaries({"metric": names, "series": st.one_of(st.lists(points, max_size=6), values)})
rows_line = st.dictionaries(names, values, max_size=4).flatmap(
    lambda d: st.builds(lambda step: {"step": step, **d}, steps)
)


def _encode(obj) -> str:
    return json.dumps(obj, allow_nan=True)


def _deep_value_line(depth: int) -> str:
    return '{"metric": "m", "series": [[0, ' + "[" * depth + "]" * depth + "]]}"


raw_line = st.one_of(
    st.text(max_size=40),
    st.binary(max_size=40).map(lambda b: b.decode("latin-1")),
    st.integers(min_value=1, max_value=3000).map(lambda n: "[" * n + "]" * n),
    st.integers(min_value=1, max_value=3000).map(_deep_value_line),
    st.sampled_from([
        '{"metric": "m\\ud800", "series": [[0, 1]]}',
        '{"metric": "m\\u0000", "series": [[0, 1]]}',
        '{"metric": "m", "series": [[0, 1e400]]}',
        '{"metric": "m", "series": [[0, 1' + "0" * 5000 + "]]}",
    ]),
)
record_lines = st.lists(
    st.one_of(series_line.map(_encode), rows_line.map(_encode), raw_line), min_size=0, max_size=6
)


class _Store:
    """One SQLite store per test, reused by its examples: an example's run adds to it or leaves it as it was."""

    def __init__(self, folder) -> None:
        self.url = f"sqlite:///{folder / 'store.db'}"

    def counts(self) -> tuple[int, int]:
        with open_store(self.url) as store:
            return store.count("runs"), store.count("metric_values")


@pytest.fixture(scope="module")
def store(request, tmp_path_factory):
    return _Store(tmp_path_factory.mktemp(request.node.name[:20]))


def _run_cli(store: _Store, record: str, gates: str, *extra: str) -> None:
    before = store.counts()
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(["run", record, "--gates", gates, "--store", store.url, "--json", *extra])
    after = store.counts()
    stderr = err.getvalue()
    assert code in (0, 1, 2), stderr
    assert "Traceback" not in stderr and "internal error" not in stderr, stderr
    if code == 2:
        assert after == before, stderr  # nothing stored
        assert "metric-gate: nothing was stored" in stderr
    else:
        json.loads(out.getvalue())  # the verdict
        assert after[0] - before[0] in (0, 1)  # one new run, or none when nothing is declared


def _write(folder: str, name: str, text: str) -> str:
    path = os.path.join(folder, name)
    with open(path, "w", encoding="utf-8", errors="surrogatepass") as fh:
        fh.write(text)
    return path


@FUZZ
@given(lines=record_lines, rows=st.booleans())
def test_any_record_exits_with_a_documented_status_and_stores_nothing_on_error(store, lines, rows):
    with tempfile.TemporaryDirectory() as folder:
        record = _write(folder, "record.jsonl", "\n".join(lines) + "\n")
        gates = _write(folder, "gates.yaml", GATES_YAML)
        _run_cli(store, record, gates, *(["--format", "rows"] if rows else []))


gate_values = st.one_of(values, st.sampled_from(["all", "last", [0, 1], [2**63], [-1], {"rel_up": 1, "rel_down": 1}]))
gate = st.one_of(
    st.fixed_dictionaries(
        {"metric_key": st.one_of(names, st.sampled_from(["m", "n", "m" * 600, "m\x00", "m\ud800", "m\nTRUSTED"]))},
        optional={"steps": gate_values, "constraint": gate_values, "enforce": st.one_of(st.booleans(), values),
                  "allowlist_reason": st.one_of(st.none(), st.text(max_size=8), values)},
    ),
    values,
)
gates_doc = st.one_of(
    st.lists(gate, max_size=4),
    st.fixed_dictionaries({"gates": st.lists(gate, max_size=4)}, optional={"defaults": values}),
    values,
)
yaml_bombs = st.sampled_from([
    "a: &a [x, y]\nb: [*a, *a]\ngates: []\n",
    "gates: &g\n  - metric_key: m\n    steps: *g\n",
    "x: &x lol\ngates:\n  - metric_key: *x\n",
    "gates: " + "[" * 200 + "]" * 200 + "\n",
    "gates:\n  - metric_key: m\n    metric_key: n\n",
    "gates: !!python/object:os.system [echo]\n",
    "\t\x00: [",
])


def _yaml_text(doc) -> str:
    try:
        return yaml.safe_dump(doc, allow_unicode=True)
    except (yaml.YAMLError, UnicodeEncodeError):
        return json.dumps(doc)


@FUZZ
@given(text=st.one_of(gates_doc.map(_yaml_text), yaml_bombs, st.text(max_size=60)))
def test_any_yaml_gates_file_exits_with_a_documented_status_and_stores_nothing_on_error(store, text):
    with tempfile.TemporaryDirectory() as folder:
        record = _write(folder, "record.jsonl", RECORD)
        gates = _write(folder, "gates.yaml", text)
        _run_cli(store, record, gates)


@FUZZ
@given(text=st.one_of(gates_doc.map(_encode), st.integers(1, 5000).map(lambda n: "[" * n + "]" * n),
                      st.text(max_size=60)))
def test_any_json_gates_file_exits_with_a_documented_status_and_stores_nothing_on_error(store, text):
    with tempfile.TemporaryDirectory() as folder:
        record = _write(folder, "record.jsonl", RECORD)
        gates = _write(folder, "gates.json", text)
        _run_cli(store, record, gates)


def _call(arguments: dict) -> str:
    return "register_ci_gate(" + ", ".join(f"{k}={v!r}" for k, v in arguments.items()) + ")\n"


python_gates = st.one_of(
    st.lists(st.dictionaries(st.sampled_from(["metric_key", "steps", "constraint", "enforce", "allowlist_reason",
                                              "other"]), gate_values, max_size=4).map(_call), max_size=3)
    .map("".join),
    st.sampled_from([
        "register_ci_gate(metric_key='m', steps=" + "[" * 150 + "]" * 150 + ")\n",
        "register_ci_gate(metric_key='m', steps=" + "[" * 5000 + "]" * 5000 + ")\n",
        "x = " + "-" * 20000 + "1\n",
        "register_ci_gate('m')\n",
        "register_ci_gate(**{'metric_key': 'm'})\n",
        "register_ci_gate(metric_key=f'{x}')\n",
    ]),
    st.text(max_size=60),
)


@FUZZ
@given(text=python_gates)
def test_any_python_gates_file_exits_with_a_documented_status_and_stores_nothing_on_error(store, text):
    with tempfile.TemporaryDirectory() as folder:
        record = _write(folder, "record.jsonl", RECORD)
        gates = _write(folder, "ci_gates.py", text)
        _run_cli(store, record, gates)
