"""``metric-gate run --format tensorboard|csv``: nights read from the logs trainers write, on both stores (issue 21)."""

from __future__ import annotations

import json

import pytest
from _log_writers import GATES_YAML, night_points, write_lightning_csv, write_tensorboard_night

from airflow_metric_gate.cli import main
from airflow_metric_gate.schemas.verdict import VerdictSchema
from airflow_metric_gate.store import open_store


def _write(format: str, folder, reward: float):
    folder.mkdir(parents=True)
    if format == "tensorboard":
        return write_tensorboard_night(folder, night_points(reward))
    write_lightning_csv(folder / "metrics.csv", night_points(reward))
    (folder / "hparams.yaml").write_text("lr: 0.1\n")
    (folder / "_SUCCESS").touch()
    return folder


def _run(capsys, *argv):
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


def _night(capsys, tmp_path, store_url, format, day, reward, *extra):
    if format == "tensorboard":
        pytest.importorskip("tensorboardX")
    gates = tmp_path / "gates.yaml"
    gates.write_text(GATES_YAML)
    record = _write(format, tmp_path / f"night{day}", reward)
    return _run(capsys, "run", record, "--format", format, "--gates", gates, "--series", "rl", "--store", store_url,
                "--run-id", f"night-{day}", "--logical-date", f"2026-11-{day:02d}T00:00:00Z", *extra)


@pytest.mark.parametrize("format", ["tensorboard", "csv"])
def test_clean_nights_pass_and_a_regressed_night_exits_1(capsys, tmp_path, store_url, format):
    for day in range(1, 5):
        code, out, err = _night(capsys, tmp_path, store_url, format, day, 0.8 + 0.01 * day, "--enforce")
        assert code == 0, out + err
    code, out, err = _night(capsys, tmp_path, store_url, format, 5, 0.4, "--enforce", "--json")
    assert code == 1, err
    verdict = json.loads(out)
    VerdictSchema().load(verdict)
    assert verdict["trusted"] is False
    assert verdict["counts"] == {"PASS": 4, "FAIL": 4, "INACTIVE": 0, "ERROR": 0}
    assert {(r["metric_key"], r["side"], r["n"]) for r in verdict["results"]} == {("rollout/raw_reward", "below", 4)}
    with open_store(store_url) as store:
        assert store.get_run("night-5").status == "untrusted"
        assert store.get_run("night-4").status == "trusted"
        assert store.count("metric_values") == 5 * 8


def test_a_truncated_event_file_exits_2_and_stores_nothing(capsys, tmp_path, store_url):
    pytest.importorskip("tensorboardX")
    folder = write_tensorboard_night(tmp_path / "night", night_points(0.8))
    (event_file,) = [p for p in folder.iterdir() if "tfevents" in p.name]
    event_file.write_bytes(event_file.read_bytes()[:-3])
    gates = tmp_path / "gates.yaml"
    gates.write_text(GATES_YAML)
    code, out, err = _run(capsys, "run", folder, "--format", "tensorboard", "--gates", gates, "--store", store_url)
    assert code == 2
    assert str(event_file) in err and "byte offset" in err and "truncated" in err
    with open_store(store_url) as store:
        assert store.count("runs") == 0 and store.count("metric_values") == 0


def test_a_csv_log_without_a_step_column_exits_2_and_stores_nothing(capsys, tmp_path, store_url):
    record = tmp_path / "metrics.csv"
    record.write_text("epoch,rollout/raw_reward\n0,0.8\n")
    gates = tmp_path / "gates.yaml"
    gates.write_text(GATES_YAML)
    code, out, err = _run(capsys, "run", record, "--format", "csv", "--gates", gates, "--store", store_url)
    assert code == 2
    assert f"{record}:1: no 'step' column" in err
    with open_store(store_url) as store:
        assert store.count("runs") == 0


def test_run_gate_reads_a_log_format_in_python(tmp_path, store_url):
    from airflow_metric_gate import run_gate

    gates = [{"metric_key": "rollout/raw_reward", "steps": "last", "constraint": {"rel_up": 0.1, "rel_down": 0.1}}]
    for day, reward in ((1, 0.8), (2, 0.8), (3, 0.5)):
        record = write_lightning_csv(tmp_path / f"n{day}" / "metrics.csv", night_points(reward))
        verdict = run_gate(record.parent, gates, series="rl", store=store_url, format="csv", run_id=f"n{day}",
                           logical_date=f"2026-11-0{day}", enforce=True)
    assert verdict.blocked and verdict.counts["FAIL"] == 1
    assert verdict.results[0]["at_step"] == 3 and verdict.results[0]["current"] == pytest.approx(0.53)


def test_a_csv_cell_that_is_not_a_number_is_reported_or_an_error_under_calibrated(capsys, tmp_path, store_url):
    record = tmp_path / "metrics.csv"
    record.write_text("rollout/raw_reward,step\n0.8,0\noops,1\n0.9,2\n")
    gates = tmp_path / "gates.yaml"
    gates.write_text("gates:\n  - metric_key: rollout/raw_reward\n    steps: all\n"
                     "    constraint: {rel_up: 0.2, rel_down: 0.2}\n")
    code, out, err = _run(capsys, "run", record, "--format", "csv", "--gates", gates, "--store", store_url,
                          "--json", "--all", "--run-id", "reference")
    assert code == 0, err
    verdict = json.loads(out)
    assert [r["step"] for r in verdict["results"]] == [0, 2]  # the reference gate drops the point
    (warning,) = verdict["warnings"]
    assert (warning["kind"], warning["step"], warning["value"]) == ("dropped_value", 1, '"oops"')
    assert (warning["file"], warning["line"]) == (str(record), 3)
    code, out, err = _run(capsys, "run", record, "--format", "csv", "--gates", gates, "--store", store_url,
                          "--json", "--policy", "calibrated", "--run-id", "calibrated")
    (error,) = [r for r in json.loads(out)["results"] if r["status"] == "ERROR"]
    assert "oops" in error["reason"] and f"{record} line 3" in error["reason"]
