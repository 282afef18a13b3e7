"""The evaluate options travel as one ``EvaluateOptions`` or, as before, as keywords: same verdicts."""

from __future__ import annotations

import dataclasses
import inspect
import json
from datetime import datetime, timezone
from pathlib import Path

import pytest

import airflow_metric_gate
from airflow_metric_gate import api, pipeline
from airflow_metric_gate.declarations import resolve_declarations
from airflow_metric_gate.pipeline import EvaluateOptions, RunInfo, SeriesIdentity, evaluate, evaluate_options
from airflow_metric_gate.store import StoreInputError, open_store

GATES = [{"metric_key": "eval/accuracy", "steps": "last", "constraint": {"rel_down": 0.05, "rel_up": 0.05}}]


def _record(folder: Path, night: str, accuracy: float) -> Path:
    path = folder / f"{night}.jsonl"
    path.write_text(json.dumps({"metric": "eval/accuracy", "series": [[100, accuracy - 0.1], [200, accuracy]]}) + "\n")
    return path


def test_the_defaults_are_those_of_the_keywords() -> None:
    options = EvaluateOptions()
    assert dataclasses.astuple(options) == (20, 1, "mean", None, False, 200, None, None)
    checked = inspect.signature(pipeline.check_evaluate_options).parameters
    assert (options.history_limit, options.min_history, options.aggregate) == tuple(
        checked[name].default for name in ("history_limit", "min_history", "aggregate"))
    public = inspect.signature(api.run_gate).parameters
    assert (options.aggregate, options.all_results, options.max_results) == tuple(
        public[name].default for name in ("aggregate", "all_results", "max_results"))
    assert evaluate_options(None, {}, caller="evaluate") == options
    assert pipeline.OPTION_NAMES == ("history_limit", "min_history", "aggregate", "enforce", "all_results",
                                     "max_results", "max_bytes", "chunk")


def test_the_options_are_frozen_and_public() -> None:
    with pytest.raises(dataclasses.FrozenInstanceError):
        EvaluateOptions().history_limit = 3  # type: ignore[misc]
    assert airflow_metric_gate.EvaluateOptions is EvaluateOptions is api.EvaluateOptions


def test_an_unknown_option_is_refused_with_a_clear_type_error(tmp_path: Path) -> None:
    with pytest.raises(TypeError, match="unexpected keyword argument 'history'"):
        EvaluateOptions(history=3)  # type: ignore[call-arg]
    with pytest.raises(TypeError, match=r"evaluate\(\) got unexpected keyword argument\(s\) 'history'; its "
                                        r"evaluate options are history_limit, min_history, "):
        evaluate_options(None, {"history": 3}, caller="evaluate")
    with open_store(f"sqlite:///{tmp_path / 'store.db'}") as store:
        with pytest.raises(TypeError, match=r"run_gate\(\) got unexpected keyword argument\(s\) 'histroy_limit'"):
            pipeline.run_gate(store, record=_record(tmp_path, "2026-11-01", 0.8),
                              declarations=resolve_declarations(GATES), identity=SeriesIdentity("s"),
                              run=RunInfo("r1"), histroy_limit=5)
        assert store.get_run("r1") is None  # refused before anything was written
        with pytest.raises(TypeError, match=r"evaluate\(\) got unexpected keyword argument\(s\) 'foo'"):
            evaluate(store, "r1", foo=1)


def test_the_object_and_the_keywords_are_not_given_together(tmp_path: Path) -> None:
    with pytest.raises(TypeError, match=r"evaluate\(\): pass the evaluate options either as options= or as "
                                        r"keywords, not both \(got options= and min_history\)"):
        evaluate_options(EvaluateOptions(), {"min_history": 2}, caller="evaluate")
    with pytest.raises(TypeError, match="options must be an EvaluateOptions, not dict"):
        evaluate_options({"min_history": 2}, {}, caller="evaluate")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"run_gate\(\): .*not both \(got options= and enforce, history_limit\)"):
        api.run_gate(_record(tmp_path, "2026-11-01", 0.8), GATES, series="s", store=f"sqlite:///{tmp_path / 'a.db'}",
                     options=EvaluateOptions(), enforce=True, history_limit=5)


def test_an_option_out_of_range_is_refused_as_before(tmp_path: Path) -> None:
    with pytest.raises(StoreInputError, match="min_history must be an integer >= 0, got -1"):
        EvaluateOptions(min_history=-1).check()
    with open_store(f"sqlite:///{tmp_path / 'store.db'}") as store:
        with pytest.raises(StoreInputError, match="min_history must be an integer >= 0, got -1"):
            evaluate(store, "r1", options=EvaluateOptions(min_history=-1))


def test_the_object_and_the_keywords_give_the_same_verdicts(tmp_path: Path) -> None:
    nights = [("2026-11-01", 0.80), ("2026-11-02", 0.81), ("2026-11-03", 0.70)]
    by_keywords, by_options, by_api = (f"sqlite:///{tmp_path / name}" for name in ("k.db", "o.db", "a.db"))
    declarations = resolve_declarations(GATES)
    for i, (night, accuracy) in enumerate(nights):
        record = _record(tmp_path, night, accuracy)
        run = RunInfo(f"n{i}", logical_date=datetime.fromisoformat(night).replace(tzinfo=timezone.utc))
        common = {"record": record, "declarations": declarations, "identity": SeriesIdentity("s"), "run": run}
        with open_store(by_keywords) as store:
            old = pipeline.run_gate(store, **common, enforce=True, all_results=True, history_limit=5)
            rebuilt_old = evaluate(store, run.run_id, record=False, all_results=True, max_results=1)
        with open_store(by_options) as store:
            options = EvaluateOptions(enforce=True, all_results=True, history_limit=5)
            new = pipeline.run_gate(store, **common, options=options)
            rebuilt_new = evaluate(store, run.run_id, record=False,
                                   options=EvaluateOptions(all_results=True, max_results=1))
        public = api.run_gate(record, GATES, series="s", store=by_api, run_id=run.run_id, logical_date=night,
                              options=options).to_dict()
        assert old == new and rebuilt_old == rebuilt_new
        assert public == new
    assert new["blocking"] == 1 and not new["trusted"]
