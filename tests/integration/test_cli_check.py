"""``metric-gate check GATES...``: gates files checked in CI, before any night reads them."""

from __future__ import annotations

import json

from airflow_metric_gate.cli import main

GOOD = "gates:\n  - metric_key: rollout/raw_reward\n  - metric_key: train/grad_norm\n"


def _check(capsys, *argv):
    code = main(["check", *map(str, argv)])
    out, err = capsys.readouterr()
    return code, out, err


def test_valid_gates_files_exit_0_and_say_how_many_declarations(capsys, tmp_path):
    yaml_file = tmp_path / "gates.yaml"
    yaml_file.write_text(GOOD)
    py_file = tmp_path / "test_gates.py"
    py_file.write_text('register_ci_gate(metric_key="rollout/raw_reward")\n')
    code, out, err = _check(capsys, yaml_file, py_file)
    assert code == 0, err
    assert out.splitlines() == [f"{yaml_file}: 2 gate declaration(s), valid",
                                f"{py_file}: 1 gate declaration(s), valid"]


def test_an_invalid_gates_file_exits_2_naming_file_line_and_field(capsys, tmp_path):
    good = tmp_path / "good.yaml"
    good.write_text(GOOD)
    bad = tmp_path / "bad.yaml"
    bad.write_text("gates:\n  - metric_key: rollout/raw_reward\n  - metric_key: my/metric\n    steps: all\n")
    code, out, err = _check(capsys, good, bad)
    assert code == 2
    assert f"{good}: 2 gate declaration(s), valid" in out
    assert f"{bad}:3: gate 2 (my/metric): field 'constraint': missing" in err
    assert "1 of 2 gates file(s) invalid" in err
    assert "nothing was stored" not in err  # check never writes


def test_check_reports_the_warnings_a_night_would_log(capsys, tmp_path):
    gates = tmp_path / "gates.yaml"
    gates.write_text(GOOD + "  - metric_key: train/grad_norm\n")
    code, _, err = _check(capsys, gates)
    assert code == 0
    assert f"declared twice, at {gates}:3 and at {gates}:4" in err


def test_check_json_lists_each_files_declarations(capsys, tmp_path):
    gates = tmp_path / "gates.json"
    gates.write_text('[{"metric_key": "rollout/raw_reward", "steps": "last"}]')
    missing = tmp_path / "missing.yaml"
    code, out, _ = _check(capsys, gates, missing, "--json")
    assert code == 2
    report = json.loads(out)
    assert report[str(gates)]["valid"] is True and report[str(gates)]["declarations"][0]["steps"] == "last"
    assert report[str(missing)] == {"valid": False, "error": f"{missing}: no such gates file"}
