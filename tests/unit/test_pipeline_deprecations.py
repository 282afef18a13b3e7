"""``pipeline.ingest`` and ``pipeline.select`` still work, warn, and name the functions to call instead."""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import pytest

from airflow_metric_gate import pipeline
from airflow_metric_gate.declarations import resolve_declarations
from airflow_metric_gate.records import read_record
from airflow_metric_gate.selection import select_steps
from airflow_metric_gate.store import open_store

GATES = [{"metric_key": "loss", "steps": "all", "constraint": {"rel_up": 0.1, "rel_down": 0.1}}]


def _record(tmp_path: Path) -> Path:
    path = tmp_path / "night.jsonl"
    path.write_text(json.dumps({"metric": "loss", "series": [[1, 2.0], [2, 1.5]]}) + "\n")
    return path


def test_ingest_warns_and_reads_as_read_record(tmp_path: Path) -> None:
    with pytest.warns(DeprecationWarning, match=r"pipeline\.ingest is deprecated; call "
                                                r"airflow_metric_gate\.records\.read_record") as caught:
        record = pipeline.ingest(_record(tmp_path), format="series")
    assert caught[0].filename == __file__  # the warning points at the caller
    assert record.point_count() == read_record(_record(tmp_path)).point_count() == 2


def test_select_warns_and_selects_as_select_steps(tmp_path: Path) -> None:
    record, declarations = read_record(_record(tmp_path)), resolve_declarations(GATES)
    with pytest.warns(DeprecationWarning, match=r"pipeline\.select is deprecated; call "
                                                r"airflow_metric_gate\.selection\.select_steps"):
        selections = pipeline.select(record, declarations)
    assert [(s.steps, s.values) for s in selections] == \
        [(s.steps, s.values) for s in select_steps(record, declarations)] == [([1, 2], [2.0, 1.5])]


def test_the_gate_itself_calls_neither(tmp_path: Path) -> None:
    with open_store(f"sqlite:///{tmp_path / 'store.db'}") as store, warnings.catch_warnings():
        warnings.simplefilter("error", DeprecationWarning)
        verdict = pipeline.run_gate(store, record=_record(tmp_path), declarations=resolve_declarations(GATES),
                                    identity=pipeline.SeriesIdentity("s"), run=pipeline.RunInfo("r1"))
    assert verdict["trusted"]


def test_reading_an_inline_selection_warns_and_decodes_it(tmp_path: Path) -> None:
    selections = select_steps(read_record(_record(tmp_path)), resolve_declarations(GATES))
    payload = pipeline.selection_to_payload(selections)
    with pytest.warns(DeprecationWarning, match="pass the reference SelectStepsOperator returns") as caught:
        decoded = pipeline.payload_to_selection(json.loads(json.dumps(payload)))
    assert str(caught[0].message) == pipeline.PAYLOAD_DEPRECATED and caught[0].filename == __file__
    assert [(s.steps, s.values) for s in decoded] == [(s.steps, s.values) for s in selections]


def test_a_payload_of_another_version_is_refused_without_a_warning() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error", DeprecationWarning)
        with pytest.raises(ValueError, match="not a metric-gate selection payload"):
            pipeline.payload_to_selection({"version": 2, "gates": []})
