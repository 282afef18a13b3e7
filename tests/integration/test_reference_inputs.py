"""Inputs the reference gate accepts are accepted here too (SPEC 2, 3, 4), on both stores.

Each case runs twice: through ``metric-gate run`` and through the four operators chained as in the
nightly DAG (the store behind the ``metric_gate_db`` connection).
"""

from __future__ import annotations

import json
import logging
from datetime import datetime, timezone

import pytest
from _fakes import night_context
from airflow.sdk.exceptions import AirflowFailException

from airflow_metric_gate.cli import main
from airflow_metric_gate.declarations import DeclarationError
from airflow_metric_gate.operators.evaluate import EvaluateGateOperator
from airflow_metric_gate.operators.ingest import IngestRecordOperator
from airflow_metric_gate.operators.persist import PersistValuesOperator
from airflow_metric_gate.operators.select import SelectStepsOperator
from airflow_metric_gate.store import open_store

pytestmark = pytest.mark.slow  # the reference inputs through every entry point: 15 s in all

REWARD_ALL = "  - metric_key: rollout/raw_reward\n    steps: all\n    constraint: {rel_up: 0.2, rel_down: 0.2}\n"
GRAD = "  - metric_key: train/grad_norm\n"


NIGHT = datetime(2026, 11, 1, tzinfo=timezone.utc)


def _write(path, text):
    path.write_text(text)
    return path


def _record(path, *lines):
    return _write(path, "".join((x if isinstance(x, str) else json.dumps(x)) + "\n" for x in lines))


def _gates(path, *entries):
    return _write(path, "gates:\n" + "".join(entries))


def via_cli(store_url, record, gates, *, enforce=False, capsys=None):
    """``metric-gate run --json --all``: (exit status, verdict or None, stderr)."""
    argv = ["run", str(record), "--gates", str(gates), "--series", "rl", "--store", store_url, "--json", "--all"]
    code = main(argv + (["--enforce"] if enforce else []))
    out, err = capsys.readouterr()
    return code, (json.loads(out) if out.strip() else None), err


def via_operators(store_url, record, gates, monkeypatch, *, enforce=False):
    """The four operators in a row: the verdict pushed to XCom (raises what the last task raises)."""
    monkeypatch.setenv("AIRFLOW_CONN_METRIC_GATE_DB", store_url)
    ctx = night_context(NIGHT, run_id="scheduled__2026-11-01T00:00:00+00:00", task_id="t")
    ti = ctx["ti"]
    summary = IngestRecordOperator(task_id="ingest_record", location=str(record)).execute(ctx)
    selection = SelectStepsOperator(task_id="select_steps", record=summary, gates_file=str(gates)).execute(ctx)
    persisted = PersistValuesOperator(task_id="persist_values", series="rl", selection=selection).execute(ctx)
    EvaluateGateOperator(task_id="evaluate_gate", run=persisted, enforce=enforce, all_results=True).execute(ctx)
    return ti.pushed["return_value"]


@pytest.fixture(params=["cli", "operators"])
def gate(request, store_url, monkeypatch, capsys):
    """Run one night through the command line or the operators; return ``(verdict, messages)``.

    ``messages`` is stderr (command line) or the task log (operators).
    """

    def run(record, gates, *, enforce=False):
        if request.param == "cli":
            code, verdict, err = via_cli(store_url, record, gates, enforce=enforce, capsys=capsys)
            assert code == (1 if enforce and verdict and verdict["blocking"] else 0), err
            return verdict, err
        caplog = request.getfixturevalue("caplog")
        caplog.set_level(logging.INFO)
        verdict = via_operators(store_url, record, gates, monkeypatch, enforce=enforce)
        out, err = capsys.readouterr()  # the task log, as Airflow's logging prints it here
        return verdict, out + err + caplog.text

    run.kind = request.param
    return run


def _results(verdict):
    return [(r["metric_key"], r["status"], r["step"], r["current"]) for r in verdict["results"]]


# -- 1. an empty record ------------------------------------------------------------------------


@pytest.mark.parametrize("content", ["", "\n\n"], ids=["empty-file", "blank-lines"])
def test_empty_record_gives_every_declaration_the_absent_metric_error(gate, store_url, tmp_path, content):
    record = _write(tmp_path / "night.jsonl", content)
    gates = _gates(tmp_path / "gates.yaml", REWARD_ALL, GRAD)

    verdict, _ = gate(record, gates)

    assert verdict["trusted"] is False and verdict["counts"]["ERROR"] == 2
    assert [(r["metric_key"], r["status"]) for r in verdict["results"]] == [
        ("rollout/raw_reward", "ERROR"), ("train/grad_norm", "ERROR")]
    assert all("absent from the record" in r["reason"] for r in verdict["results"])
    with open_store(store_url) as store:
        assert store.get_run(verdict["run_id"]).status == "untrusted"


def test_empty_record_fails_the_gate_only_when_enforced(gate, tmp_path):
    record = _write(tmp_path / "night.jsonl", "")
    gates = _gates(tmp_path / "gates.yaml", GRAD)
    if gate.kind == "cli":
        verdict, _ = gate(record, gates, enforce=True)  # asserts exit status 1
        assert verdict["blocking"]
    else:
        with pytest.raises(AirflowFailException, match="absent from the record"):
            gate(record, gates, enforce=True)


# -- 2. a metric on several lines of one file ----------------------------------------------------


def test_metric_on_several_lines_of_one_file_is_merged_by_step_later_point_winning(gate, tmp_path):
    record = _record(
        tmp_path / "night.jsonl",
        {"metric": "rollout/raw_reward", "series": [[0, 0.5], [1, 0.6], [2, 0.7]]},
        {"metric": "train/grad_norm", "series": [[0, 1.0]]},
        {"metric": "rollout/raw_reward", "series": [[2, 0.75], [3, 0.8]]},  # the trainer resumed at step 2
    )
    gates = _gates(tmp_path / "gates.yaml", REWARD_ALL)

    verdict, _ = gate(record, gates)

    assert verdict["counts"] == {"PASS": 0, "FAIL": 0, "INACTIVE": 4, "ERROR": 0}, verdict
    assert _results(verdict) == [("rollout/raw_reward", "INACTIVE", s, v)
                                 for s, v in ((0, 0.5), (1, 0.6), (2, 0.75), (3, 0.8))]


# -- 3. a step that is not an int >= 0 -----------------------------------------------------------


@pytest.mark.parametrize("bad_step", [0.0, -1, "3", True], ids=["float", "negative", "string", "bool"])
def test_a_bad_step_errs_only_the_declarations_it_affects_and_names_the_point(gate, tmp_path, bad_step):
    record = _record(
        tmp_path / "night.jsonl",
        {"metric": "rollout/raw_reward", "series": [[0, 0.5], [1, 0.6], [bad_step, 0.7]]},
        {"metric": "train/grad_norm", "series": [[0, 1.0], [1, 1.1]]},
    )
    gates = _gates(
        tmp_path / "gates.yaml",
        REWARD_ALL,  # "all": the step-less point is an ERROR naming it
        "  - metric_key: rollout/raw_reward\n    steps: last\n    constraint: {rel_up: 0.5, rel_down: 0.5}\n",
        "  - metric_key: rollout/raw_reward\n    steps: [0, 1]\n    constraint: {rel_up: 0.5, rel_down: 0.5}\n",
        GRAD,
    )

    verdict, _ = gate(record, gates)

    by_key = {(r["metric_key"], r["steps_key"]): r for r in verdict["results"]}
    error = by_key[("rollout/raw_reward", '"all"')]
    assert error["status"] == "ERROR"
    assert json.dumps([bad_step, 0.7]) in error["reason"], error["reason"]  # names the point
    last = by_key[("rollout/raw_reward", '"last"')]
    assert (last["status"], last["current"], last["at_step"]) == ("INACTIVE", 0.7, None)
    assert [r["status"] for r in verdict["results"] if r["steps_key"] == "[0,1]"] == ["INACTIVE", "INACTIVE"]
    assert [r["status"] for r in verdict["results"] if r["metric_key"] == "train/grad_norm"] == ["INACTIVE"] * 2
    assert verdict["counts"]["ERROR"] == 1


def test_a_listed_step_missing_because_of_a_bad_step_names_the_point(gate, tmp_path):
    record = _record(tmp_path / "night.jsonl", {"metric": "rollout/raw_reward", "series": [[0, 0.5], ["3", 0.7]]})
    gates = _gates(tmp_path / "gates.yaml", "  - metric_key: rollout/raw_reward\n    steps: [0, 3]\n"
                   "    constraint: {rel_up: 0.5, rel_down: 0.5}\n")

    verdict, _ = gate(record, gates)

    (result,) = verdict["results"]
    assert result["status"] == "ERROR"
    assert "listed step(s) 3 missing" in result["reason"] and '["3", 0.7]' in result["reason"], result["reason"]


# -- 4. register_ci_gate(...) assigned ------------------------------------------------------------


def test_only_bare_register_ci_gate_statements_count(gate, tmp_path):
    record = _record(
        tmp_path / "night.jsonl",
        {"metric": "rollout/raw_reward", "series": [[0, 0.5], [1, 0.6]]},
        {"metric": "train/grad_norm", "series": [[0, 1.0], [1, 1.1]]},
        {"metric": "train/ppo_kl", "series": [[0, 0.1], [1, 0.1]]},
    )
    gates = _write(tmp_path / "test_gates.py", (
        'register_ci_gate(metric_key="rollout/raw_reward")\n'
        '_ = register_ci_gate(metric_key="train/grad_norm")\n'
        'kl_gate: object = register_ci_gate(metric_key="train/ppo_kl")\n'
        'no_value: object\n'
    ))

    verdict, _ = gate(record, gates)

    assert {r["metric_key"] for r in verdict["results"]} == {"rollout/raw_reward"}
    assert verdict["counts"]["INACTIVE"] == 2


# -- 5. the same coordinates declared twice ------------------------------------------------------


def test_same_coordinates_declared_twice_collapse_with_a_warning_naming_both_places(gate, tmp_path):
    record = _record(tmp_path / "night.jsonl", {"metric": "rollout/raw_reward", "series": [[0, 0.5], [1, 0.6]]})
    gates = _gates(tmp_path / "gates.yaml", REWARD_ALL, REWARD_ALL)

    verdict, messages = gate(record, gates)

    assert verdict["counts"]["INACTIVE"] == 2 and len(verdict["results"]) == 2
    assert "declared twice" in messages and f"{gates}:2" in messages and f"{gates}:5" in messages, messages


def test_same_coordinates_with_conflicting_enforce_is_an_error_naming_both_places(
    store_url, tmp_path, monkeypatch, capsys
):
    record = _record(tmp_path / "night.jsonl", {"metric": "rollout/raw_reward", "series": [[0, 0.5], [1, 0.6]]})
    gates = _gates(tmp_path / "gates.yaml", REWARD_ALL, REWARD_ALL + "    enforce: true\n")

    code, verdict, err = via_cli(store_url, record, gates, capsys=capsys)
    assert code == 2 and verdict is None
    assert "enforce" in err and f"{gates}:2" in err and f"{gates}:5" in err, err
    # found when the operator is built (the DAG is parsed), before any night runs
    with pytest.raises(DeclarationError, match="enforce") as failed:
        via_operators(store_url, record, gates, monkeypatch)
    assert f"{gates}:2" in str(failed.value) and f"{gates}:5" in str(failed.value)
    with open_store(store_url) as store:
        assert store.count("runs") == 0


# -- 5. values that are not numbers are dropped, and reported ------------------------------------

REWARD_LIST_500 = "  - metric_key: rollout/raw_reward\n    steps: [500]\n    constraint: {rel_up: 0.5, rel_down: 0.5}\n"


@pytest.mark.parametrize("value", [None, True, "nan"], ids=["null", "bool", "string"])
def test_a_dropped_value_keeps_the_reference_status_and_is_reported_with_step_file_and_line(gate, tmp_path, value):
    record = _record(
        tmp_path / "night.jsonl",
        {"metric": "train/grad_norm", "series": [[0, 1.0]]},
        {"metric": "rollout/raw_reward", "series": [[0, value], [1, 1.1]]},
    )
    gates = _gates(tmp_path / "gates.yaml", REWARD_ALL)

    verdict, messages = gate(record, gates)

    assert verdict["trusted"] is True and verdict["counts"]["INACTIVE"] == 1, verdict  # as the reference decides
    assert _results(verdict) == [("rollout/raw_reward", "INACTIVE", 1, 1.1)]
    [warning] = verdict["warnings"]
    assert warning["kind"] == "dropped_value"
    assert (warning["metric_key"], warning["step"], warning["value"]) == ("rollout/raw_reward", 0, json.dumps(value))
    assert (warning["file"], warning["line"]) == (str(record), 2)
    assert f"{record} line 2" in warning["message"] and "not a number" in warning["message"]
    assert f"warning: metric 'rollout/raw_reward' step 0: value {json.dumps(value)} ({record} line 2)" in messages


def test_a_listed_step_whose_value_was_dropped_says_so_instead_of_missing(gate, tmp_path):
    record = _record(tmp_path / "night.jsonl", {"metric": "rollout/raw_reward", "series": [[499, 0.5], [500, "nan"]]})
    gates = _gates(tmp_path / "gates.yaml", REWARD_LIST_500)

    verdict, _ = gate(record, gates)

    [error] = verdict["results"]
    assert error["status"] == "ERROR" and verdict["trusted"] is False
    assert "missing from the record" not in error["reason"], error["reason"]
    assert f'listed step 500: its value "nan" ({record} line 1) is not a number' in error["reason"]
    assert verdict["warnings"][0]["step"] == 500


def test_a_record_without_dropped_values_has_no_warnings_field(gate, tmp_path):
    record = _record(tmp_path / "night.jsonl", {"metric": "rollout/raw_reward", "series": [[0, 0.5], [1, 0.6]]})
    verdict, _ = gate(record, _gates(tmp_path / "gates.yaml", REWARD_ALL))
    assert "warnings" not in verdict


# -- 6. gates files with a byte order mark or a coding cookie ------------------------------------


@pytest.mark.parametrize(
    ("name", "content"),
    [
        ("gates.yaml", "\ufeffgates:\n" + REWARD_ALL),
        ("gates.json", '\ufeff[{"metric_key": "rollout/raw_reward", "steps": "all", '
                       '"constraint": {"rel_up": 0.2, "rel_down": 0.2}}]'),
        ("test_gates.py", '\ufeffregister_ci_gate(metric_key="rollout/raw_reward")\n'),
    ],
    ids=["yaml-bom", "json-bom", "python-bom"],
)
def test_gates_files_with_a_byte_order_mark_are_read(gate, tmp_path, name, content):
    gates = tmp_path / name
    gates.write_bytes(content.encode("utf-8"))
    record = _record(tmp_path / "night.jsonl", {"metric": "rollout/raw_reward", "series": [[0, 0.5], [1, 0.6]]})

    verdict, _ = gate(record, gates)

    assert verdict["counts"]["INACTIVE"] == 2 and verdict["trusted"] is True


def test_a_python_gates_file_with_a_coding_cookie_is_read_in_its_encoding(gate, tmp_path):
    gates = tmp_path / "test_gates.py"
    gates.write_bytes('# -*- coding: latin-1 -*-\n# récompense\nregister_ci_gate(metric_key="rollout/raw_reward")\n'
                      .encode("latin-1"))
    record = _record(tmp_path / "night.jsonl", {"metric": "rollout/raw_reward", "series": [[0, 0.5]]})

    verdict, _ = gate(record, gates)

    assert _results(verdict) == [("rollout/raw_reward", "INACTIVE", 0, 0.5)]


# -- 7. where the reference gate is lenient: judged as it judges, with a warning -----------------


def test_an_empty_metric_key_is_gated_as_written_with_a_warning_naming_file_and_line(gate, tmp_path):
    gates = _write(tmp_path / "test_gates.py", "\n".join([
        'register_ci_gate(metric_key="rollout/raw_reward")',
        'register_ci_gate(metric_key="", steps="all", constraint={"rel_up": 0.5, "rel_down": 0.5})', ""]))
    record = _record(tmp_path / "night.jsonl",
                     {"metric": "rollout/raw_reward", "series": [[0, 0.5]]}, {"metric": "", "series": [[0, 2.0]]})

    verdict, messages = gate(record, gates)

    assert _results(verdict) == [("rollout/raw_reward", "INACTIVE", 0, 0.5), ("", "INACTIVE", 0, 2.0)]
    assert f"{gates}:2 has an empty metric_key" in messages
    assert {"kind": "record", "message": f'{record}:2: the metric is named "" (empty): only a gate whose '
            'metric_key is "" gates it'} in verdict["warnings"]


@pytest.mark.parametrize("name", [5, None, True], ids=["number", "null", "bool"])
def test_a_record_line_whose_metric_is_not_a_string_is_not_gated_and_is_reported(gate, tmp_path, name):
    record = _record(
        tmp_path / "night.jsonl",
        {"metric": "rollout/raw_reward", "series": [[0, 0.5]]},
        {"metric": name, "series": [[0, 9.0]]},
    )
    verdict, messages = gate(record, _gates(tmp_path / "gates.yaml", REWARD_ALL))

    assert _results(verdict) == [("rollout/raw_reward", "INACTIVE", 0, 0.5)]
    [warning] = verdict["warnings"]
    assert warning["kind"] == "record" and warning["message"].startswith(f"{record}:2: \"metric\" is ")
    assert "is not gated" in warning["message"] and f"warning: {record}:2:" in messages


def test_last_gates_the_last_point_of_the_last_line_when_a_resumed_trainer_restarts_lower(gate, tmp_path):
    record = _record(
        tmp_path / "night.jsonl",
        {"metric": "rollout/raw_reward", "series": [[0, 0.5], [1, 0.6], [2, "NaN"]]},  # abandoned at step 2
        {"metric": "rollout/raw_reward", "series": [[0, 0.55], [1, 0.65]]},  # restarted from step 0
    )
    gates = _gates(tmp_path / "gates.yaml", "  - metric_key: rollout/raw_reward\n    steps: last\n"
                   "    constraint: {rel_up: 0.5, rel_down: 0.5}\n")

    verdict, _ = gate(record, gates)

    assert verdict["trusted"] is True, verdict
    [last] = verdict["results"]
    assert (last["status"], last["current"], last["at_step"]) == ("INACTIVE", 0.65, 1)


def test_many_dropped_points_are_listed_up_to_the_cap_and_counted_and_fit_the_xcom_limit(store_url, tmp_path):
    from airflow_metric_gate.declarations import load_gates_file
    from airflow_metric_gate.pipeline import RunInfo, SeriesIdentity, evaluate, persist, record_warnings
    from airflow_metric_gate.records import MAX_DROPPED_NOTES, read_record
    from airflow_metric_gate.selection import select_steps

    path = _record(tmp_path / "night.jsonl",
                   {"metric": "rollout/raw_reward", "series": [[s, None] for s in range(300)] + [[300, 0.5]]})
    declarations = load_gates_file(_gates(tmp_path / "gates.yaml", REWARD_ALL))
    record = read_record(path)
    warnings = record_warnings(record, declarations)
    assert [w["step"] for w in warnings[:-1]] == list(range(MAX_DROPPED_NOTES))  # the first ones, with their place
    assert warnings[-1]["kind"] == "more" and warnings[-1]["count"] == 300 - MAX_DROPPED_NOTES  # the rest counted
    with open_store(store_url) as store:
        persist(store, SeriesIdentity("rl"), RunInfo("n1"), select_steps(record, declarations), warnings=warnings)
        verdict = evaluate(store, "n1", max_bytes=3000)
    assert len(json.dumps(verdict)) <= 3000 and verdict["counts"]["INACTIVE"] == 1
    shown = [w for w in verdict["warnings"] if w["kind"] == "dropped_value"]
    assert 0 < len(shown) < MAX_DROPPED_NOTES
    assert verdict["warnings"][-1]["kind"] == "more" and len(shown) + verdict["warnings"][-1]["count"] == 300
