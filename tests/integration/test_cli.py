"""``metric-gate`` end to end on both stores (SPEC 9, 10)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from airflow_metric_gate.cli import main
from airflow_metric_gate.schemas.verdict import VerdictSchema
from airflow_metric_gate.store import open_store
from airflow_metric_gate.store.schema import SCHEMA_VERSION

C = {"rel_up": 0.2, "rel_down": 0.2}
GATES_PY = 'register_ci_gate(metric_key="rollout/raw_reward")\n'
GATES_YAML = """\
gates:
  - metric_key: rollout/raw_reward
    steps: all
    constraint: {rel_up: 0.2, rel_down: 0.2}
  - metric_key: train/grad_norm
"""


def _write_record(path, reward, grad=1.0):
    lines = [
        {"metric": "rollout/raw_reward", "series": [[s, reward + 0.01 * s] for s in range(4)]},
        {"metric": "train/grad_norm", "series": [[s, grad] for s in range(4)]},
    ]
    path.write_text("".join(json.dumps(x) + "\n" for x in lines))
    return str(path)


def _run(capsys, *argv):
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


def _night(capsys, tmp_path, store_url, day, reward, *extra, gates=None):
    record = _write_record(tmp_path / f"night{day}.jsonl", reward)
    if gates is None:
        gates = tmp_path / "gates.yaml"
        gates.write_text(GATES_YAML)
    return _run(capsys, "run", record, "--gates", gates, "--series", "rl", "--store", store_url,
                "--run-id", f"night-{day}", "--logical-date", f"2026-11-{day:02d}T00:00:00Z", *extra)


def test_one_line_python_gates_file_stores_four_rows(capsys, tmp_path, store_url):
    gates = tmp_path / "ci_gates.py"
    gates.write_text(GATES_PY)
    record = _write_record(tmp_path / "record.jsonl", 0.5)
    argv = ["run", record, "--gates", gates, "--role", "baseline", "--store", store_url, "--run-id", "r1"]
    code, out, err = _run(capsys, *argv)
    assert code == 0, err
    with open_store(store_url) as store:
        rows = store.history("rollout/raw_reward", series="default")
        assert store.count("metric_values") == 4
        assert store.count("runs") == 1
    assert sorted(r["step"] for r in rows) == [0, 1, 2, 3]
    assert {r["steps_key"] for r in rows} == {'"all"'}
    # Same --run-id again: every row count unchanged.
    code, _, err = _run(capsys, *argv)
    assert code == 0, err
    with open_store(store_url) as store:
        assert store.count("metric_values") == 4
        assert store.count("runs") == 1


def test_clean_nights_pass_and_a_regression_fails_when_enforced(capsys, tmp_path, store_url):
    for day in range(1, 5):
        code, out, err = _night(capsys, tmp_path, store_url, day, 0.8 + 0.01 * day, "--enforce")
        assert code == 0, out + err
    code, out, err = _night(capsys, tmp_path, store_url, 5, 0.4, "--enforce", "--json")
    assert code == 1
    verdict = json.loads(out)  # stdout holds only the verdict
    VerdictSchema().load(verdict)
    assert verdict["trusted"] is False and verdict["enforced"] is True
    assert verdict["counts"]["FAIL"] == 4
    fail = verdict["results"][0]
    assert fail["metric_key"] == "rollout/raw_reward" and fail["status"] == "FAIL"
    assert fail["side"] == "below" and fail["bound"] == "rel" and fail["n"] == 4
    with open_store(store_url) as store:
        assert store.get_run("night-5").status == "untrusted"
        assert store.get_run("night-4").status == "trusted"


def test_not_enforced_regression_exits_zero_and_is_untrusted(capsys, tmp_path, store_url):
    _night(capsys, tmp_path, store_url, 1, 0.8)
    code, out, _ = _night(capsys, tmp_path, store_url, 2, 0.1)
    assert code == 0
    assert "FAIL" in out and "NOT-TRUSTED" in out
    assert "metric-gate: rl run night-2: NOT-TRUSTED (8 results, 4 fail, 0 error)" in out


def test_untrusted_and_shadow_runs_never_feed_baselines(capsys, tmp_path, store_url):
    _night(capsys, tmp_path, store_url, 1, 0.8)
    _night(capsys, tmp_path, store_url, 2, 5.0)  # regressed: stored untrusted
    _night(capsys, tmp_path, store_url, 3, 9.0, "--role", "shadow")
    code, out, _ = _night(capsys, tmp_path, store_url, 4, 0.8, "--json", "--all")
    verdict = json.loads(out)
    rewards = [r for r in verdict["results"] if r["metric_key"] == "rollout/raw_reward"]
    assert [r["n"] for r in rewards] == [1, 1, 1, 1]
    assert rewards[0]["ref"] == pytest.approx(0.8)
    assert verdict["trusted"] is True


def test_backfill_compares_only_with_earlier_nights(capsys, tmp_path, store_url):
    _night(capsys, tmp_path, store_url, 10, 0.8)
    _night(capsys, tmp_path, store_url, 20, 0.8)
    code, out, _ = _night(capsys, tmp_path, store_url, 15, 0.8, "--json", "--all")
    verdict = json.loads(out)
    assert {r["n"] for r in verdict["results"]} == {1}  # only night 10, not night 20
    code, out, _ = _night(capsys, tmp_path, store_url, 5, 0.8, "--json", "--all")
    assert {r["status"] for r in json.loads(out)["results"]} == {"INACTIVE"}


def test_all_lists_every_result_in_declaration_then_step_order(capsys, tmp_path, store_url):
    _night(capsys, tmp_path, store_url, 1, 0.8)
    _, out, _ = _night(capsys, tmp_path, store_url, 2, 0.8, "--json", "--all")
    verdict = json.loads(out)
    assert [(r["metric_key"], r["step"]) for r in verdict["results"]] == [
        ("rollout/raw_reward", s) for s in range(4)
    ] + [("train/grad_norm", s) for s in range(4)]
    assert verdict["counts"] == {"PASS": 8, "FAIL": 0, "INACTIVE": 0, "ERROR": 0}
    _, out, _ = _night(capsys, tmp_path, store_url, 3, 0.8, "--json")
    assert json.loads(out)["results"] == []


def test_missing_metric_is_an_error_result(capsys, tmp_path, store_url):
    gates = tmp_path / "gates.json"
    gates.write_text(json.dumps([{"metric_key": "train/ppo_kl"}]))
    code, out, _ = _night(capsys, tmp_path, store_url, 1, 0.8, "--json", "--enforce", gates=gates)
    verdict = json.loads(out)
    assert code == 1
    (error,) = verdict["results"]
    assert error["status"] == "ERROR" and "absent" in error["reason"]
    assert error["step"] is None and error["n"] == 0 and error["current"] is None


def test_max_results_truncates_with_a_count(capsys, tmp_path, store_url):
    _night(capsys, tmp_path, store_url, 1, 0.8)
    _, out, _ = _night(capsys, tmp_path, store_url, 2, 9.0, "--json", "--max-results", "1")
    verdict = json.loads(out)
    assert len(verdict["results"]) == 1 and verdict["truncated"] == 3


@pytest.mark.parametrize(
    ("record_text", "gates_text", "gates_name", "expected"),
    [
        ('{"metric": "m", "series": [[0, 1.0]]}\nnot json\n', GATES_YAML, "gates.yaml", "record.jsonl:2"),
        ('{"metric": "m", "series": [[0]]}\n', GATES_YAML, "gates.yaml", "record.jsonl:1"),
        ('{"metric": "m", "series": [[0, 1.0]]}\n', "gates:\n  - metric_key: nope/unknown\n", "gates.yaml",
         "no defaults entry"),
        ('{"metric": "m", "series": [[0, 1.0]]}\n', 'register_ci_gate(metric_key="m", steps=STEPS)\n', "g.py",
         "steps"),
        ('{"metric": "m", "series": [[0, 1.0]]}\n',
         "gates:\n  - metric_key: train/grad_norm\n  - metric_key: train/grad_norm\n    min_failing_steps: 2\n",
         "gates.yaml", "declared twice with different min_failing_steps"),
    ],
)
def test_bad_input_exits_2_names_the_place_and_stores_nothing(
    capsys, tmp_path, store_url, record_text, gates_text, gates_name, expected
):
    record = tmp_path / "record.jsonl"
    record.write_text(record_text)
    gates = tmp_path / gates_name
    gates.write_text(gates_text)
    code, out, err = _run(capsys, "run", record, "--gates", gates, "--store", store_url)
    assert code == 2
    assert expected in err
    assert out == ""
    with open_store(store_url) as store:
        assert store.count("runs") == 0


def test_mark_untrusted_removes_a_night_from_baselines(capsys, tmp_path, store_url):
    _night(capsys, tmp_path, store_url, 1, 0.8)
    _night(capsys, tmp_path, store_url, 2, 0.9)
    code, out, _ = _run(capsys, "mark-untrusted", "--run-id", "night-2", "--store", store_url)
    assert code == 0 and "marked 1 run(s) untrusted" in out
    code, out, _ = _run(capsys, "mark-untrusted", "--run-id", "night-2", "--store", store_url)
    assert "marked 0 run(s) untrusted" in out
    _, out, _ = _night(capsys, tmp_path, store_url, 3, 0.8, "--json", "--all")
    assert json.loads(out)["results"][0]["ref"] == pytest.approx(0.8)
    code, out, _ = _run(capsys, "mark-trusted", "--run-id", "night-2", "--store", store_url)
    assert "marked 1 run(s) trusted" in out


def test_history_and_db_upgrade(capsys, tmp_path, store_url):
    code, out, _ = _run(capsys, "db", "upgrade", "--store", store_url)
    assert code == 0 and f"schema version {SCHEMA_VERSION} (was 0)" in out
    _night(capsys, tmp_path, store_url, 1, 0.8)
    code, out, _ = _run(capsys, "history", "rollout/raw_reward", "--series", "rl", "--step", "2",
                        "--store", store_url, "--json")
    rows = json.loads(out)
    assert code == 0 and len(rows) == 1
    assert rows[0]["value"] == pytest.approx(0.82) and rows[0]["run_id"] == "night-1"
    code, out, _ = _run(capsys, "history", "rollout/raw_reward", "--series", "rl", "--store", store_url)
    assert "night-1" in out and "LOGICAL DATE" in out


def test_store_url_from_environment(capsys, tmp_path, monkeypatch):
    url = f"sqlite:///{tmp_path / 'env.db'}"
    monkeypatch.setenv("METRIC_GATE_STORE", url)
    gates = tmp_path / "ci_gates.py"
    gates.write_text(GATES_PY)
    code, _, err = _run(capsys, "run", _write_record(tmp_path / "r.jsonl", 0.5), "--gates", gates)
    assert code == 0, err
    assert (tmp_path / "env.db").exists()


def test_console_script_runs(tmp_path):
    gates = tmp_path / "ci_gates.py"
    gates.write_text(GATES_PY)
    record = _write_record(tmp_path / "r.jsonl", 0.5)
    proc = subprocess.run(
        [sys.executable, "-m", "airflow_metric_gate.cli", "run", record, "--gates", str(gates),
         "--store", f"sqlite:///{tmp_path / 's.db'}", "--json"],
        capture_output=True, text=True, check=False,
    )
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["counts"]["INACTIVE"] == 4


def test_runs_and_show_rebuild_a_stored_verdict(capsys, tmp_path, store_url):
    _night(capsys, tmp_path, store_url, 1, 0.8)
    _night(capsys, tmp_path, store_url, 2, 0.2)
    code, out, _ = _run(capsys, "runs", "--series", "rl", "--store", store_url, "--json")
    runs = json.loads(out)
    assert code == 0
    assert [(r["run_id"], r["status"]) for r in runs] == [("night-2", "untrusted"), ("night-1", "trusted")]
    code, out, _ = _run(capsys, "show", "night-2", "--store", store_url, "--json")
    verdict = json.loads(out)
    assert code == 0 and verdict["counts"]["FAIL"] == 4 and verdict["run_id"] == "night-2"
    with open_store(store_url) as store:
        assert store.get_run("night-2").status == "untrusted"  # show is read-only
    code, _, err = _run(capsys, "show", "nope", "--store", store_url)
    assert code == 2 and "no run 'nope'" in err


def test_show_rebuilds_the_enforcement_the_run_was_evaluated_with(capsys, tmp_path, store_url):
    _night(capsys, tmp_path, store_url, 1, 0.8, "--enforce")
    code, run_out, _ = _night(capsys, tmp_path, store_url, 2, 0.2, "--enforce", "--json")
    assert code == 1
    code, out, _ = _run(capsys, "show", "night-2", "--store", store_url, "--json")
    shown = json.loads(out)
    assert code == 0  # show reports, it does not gate
    assert shown["enforced"] is True and shown["blocking"] == json.loads(run_out)["blocking"] == 4
    _, out, _ = _run(capsys, "show", "night-2", "--store", store_url)
    assert "this run fails the gate" in out
    # Evaluated again without --enforce (same run id): show follows the latest evaluation.
    _night(capsys, tmp_path, store_url, 2, 0.2)
    _, out, _ = _run(capsys, "show", "night-2", "--store", store_url, "--json")
    assert json.loads(out)["enforced"] is False and json.loads(out)["blocking"] == 0


@pytest.mark.parametrize("argv", [["show", "nope"], ["replay", "--series", "nope"], ["history", "m"],
                                  ["runs", "--limit", "0"], ["show"]])
def test_read_only_commands_never_say_nothing_was_stored(capsys, store_url, argv):
    code, _, err = _run(capsys, *argv, "--store", store_url)
    assert code == 2, err
    assert "nothing was stored" not in err


def test_show_of_an_unknown_run_points_to_runs(capsys, store_url):
    with open_store(store_url) as store:
        store.upgrade()  # a store with no runs (show never creates one)
    code, _, err = _run(capsys, "show", "nope", "--store", store_url)
    assert code == 2
    assert "no run 'nope' in the metric store; see `metric-gate runs`" in err and "persist" not in err


def test_a_usage_error_of_a_writing_command_says_nothing_was_stored(capsys, store_url):
    code, _, err = _run(capsys, "run", "--store", store_url)  # no RECORD, no --gates
    assert code == 2 and "metric-gate: nothing was stored" in err


def test_runs_filters_by_suite_and_backend(capsys, tmp_path, store_url):
    gates = tmp_path / "gates.yaml"
    gates.write_text(GATES_YAML)
    for run_id, backend, suite in (("a", "cuda", "nightly-8xh100"), ("b", "rocm", "nightly-8xh100"),
                                   ("c", "cuda", "weekly-64xh100")):
        code, _, err = _run(capsys, "run", _write_record(tmp_path / f"{run_id}.jsonl", 0.8), "--gates", gates,
                            "--series", "rl", "--backend", backend, "--suite", suite, "--run-id", run_id,
                            "--store", store_url)
        assert code == 0, err

    def listed(*options):
        code, out, err = _run(capsys, "runs", "--series", "rl", *options, "--store", store_url, "--json")
        assert code == 0, err
        return sorted(r["run_id"] for r in json.loads(out))

    assert listed() == ["a", "b", "c"]
    assert listed("--suite", "nightly-8xh100") == ["a", "b"]
    assert listed("--backend", "cuda") == ["a", "c"]
    assert listed("--backend", "cuda", "--suite", "nightly-8xh100") == ["a"]
    code, out, _ = _run(capsys, "runs", "--backend", "rocm", "--store", store_url)
    assert code == 0 and " b " in out and " a " not in out and "BACKEND" in out and "SUITE" in out


def test_history_prints_the_band_settings_once_per_coordinate(capsys, tmp_path, store_url):
    for day in (1, 2, 3):
        _night(capsys, tmp_path, store_url, day, 0.8)
    code, out, _ = _run(capsys, "history", "rollout/raw_reward", "--series", "rl", "--store", store_url)
    assert code == 0
    constraint = '{"rel_down":0.2,"rel_up":0.2}'
    assert out.count(constraint) == 1, out  # once, above its 12 rows (3 nights x 4 steps)
    heading = out.splitlines()[0]
    assert "rollout/raw_reward" in heading and 'steps "all"' in heading and constraint in heading
    assert "backend cuda" in heading and "suite default" in heading
    assert "CONSTRAINT" not in out and sum(line.strip().startswith("2026-11-0") for line in out.splitlines()) == 12
    other = tmp_path / "other.yaml"
    other.write_text("gates:\n  - metric_key: rollout/raw_reward\n    steps: [1, 3]\n"
                     "    constraint: {rel_up: 0.5, rel_down: 0.5}\n")
    _night(capsys, tmp_path, store_url, 4, 0.8, gates=other)
    code, out, _ = _run(capsys, "history", "rollout/raw_reward", "--series", "rl", "--store", store_url)
    assert out.count('{"rel_down":0.5,"rel_up":0.5}') == 1 and out.count(constraint) == 1
    assert out.count("steps [1,3]") == 1


def test_median_and_mean_baselines_differ_as_expected(capsys, tmp_path, store_url):
    for day, reward in ((1, 1.0), (2, 1.0), (3, 10.0)):
        _night(capsys, tmp_path, store_url, day, reward)
        _run(capsys, "mark-trusted", "--run-id", f"night-{day}", "--store", store_url)  # keep the outlier
    _, out, _ = _night(capsys, tmp_path, store_url, 4, 1.0, "--json", "--all")
    mean = json.loads(out)["results"][0]
    assert mean["ref"] == pytest.approx(4.0) and mean["n"] == 3 and mean["status"] == "FAIL"
    _, out, _ = _night(capsys, tmp_path, store_url, 4, 1.0, "--json", "--all", "--aggregate", "median")
    median = json.loads(out)["results"][0]
    assert median["ref"] == pytest.approx(1.0) and median["n"] == 3 and median["status"] == "PASS"


def test_rebaseline_starts_a_fresh_history(capsys, tmp_path, store_url):
    _night(capsys, tmp_path, store_url, 1, 0.8)
    _night(capsys, tmp_path, store_url, 2, 0.8)
    _run(capsys, "mark-trusted", "--run-id", "night-2", "--store", store_url)
    code, out, _ = _run(capsys, "rebaseline", "--run-id", "night-2", "--store", store_url)
    assert code == 0 and "set on run night-2 (1 changed)" in out
    _, out, _ = _night(capsys, tmp_path, store_url, 3, 0.8, "--json", "--all")
    assert {r["n"] for r in json.loads(out)["results"]} == {1}  # night 1 is behind the marker
    code, out, _ = _run(capsys, "rebaseline", "--run-id", "night-2", "--undo", "--store", store_url)
    assert "removed from run night-2 (1 changed)" in out
    _, out, _ = _night(capsys, tmp_path, store_url, 3, 0.8, "--json", "--all")
    assert {r["n"] for r in json.loads(out)["results"]} == {2}
    code, _, err = _run(capsys, "rebaseline", "--run-id", "nope", "--store", store_url)
    assert code == 2 and "no run 'nope'" in err


def _regressed_record(path, steps=120):
    """The reward collapses from step 40 (80 of 120 steps fail), worst at step 100; grad_norm stays."""
    reward = [0.8 if s < 40 else (0.2 if s == 100 else 0.5) for s in range(steps)]
    lines = [
        {"metric": "rollout/raw_reward", "series": [[s, r] for s, r in enumerate(reward)]},
        {"metric": "train/grad_norm", "series": [[s, 1.0] for s in range(steps)]},
    ]
    path.write_text("".join(json.dumps(x) + "\n" for x in lines))
    return str(path)


def _long_nights(capsys, tmp_path, store_url, *extra):
    gates = tmp_path / "gates.yaml"
    gates.write_text(GATES_YAML)
    for day in (1, 2):
        record = tmp_path / f"clean{day}.jsonl"
        record.write_text("".join(json.dumps(x) + "\n" for x in (
            {"metric": "rollout/raw_reward", "series": [[s, 0.8] for s in range(120)]},
            {"metric": "train/grad_norm", "series": [[s, 1.0] for s in range(120)]},
        )))
        code, _, err = _run(capsys, "run", record, "--gates", gates, "--series", "rl", "--store", store_url,
                            "--run-id", f"night-{day}", "--logical-date", f"2026-11-0{day}")
        assert code == 0, err
    return _run(capsys, "run", _regressed_record(tmp_path / "regressed.jsonl"), "--gates", gates, "--series", "rl",
                "--store", store_url, "--run-id", "night-3", "--logical-date", "2026-11-03", *extra)


def test_regressed_night_prints_one_summary_line_first_and_a_capped_table(capsys, tmp_path, store_url):
    code, out, _ = _long_nights(capsys, tmp_path, store_url)
    assert code == 0
    lines = out.splitlines()
    assert lines[0] == ('REGRESSED rollout/raw_reward (steps "all"): 80 of 120 steps FAIL, steps 40..119, '
                        "below band, worst step 100: 0.2 vs baseline 0.8 (change -75%; band 0.64..0.96)")
    assert lines[1] == "metric-gate: rl run night-3: NOT-TRUSTED (240 results, 80 fail, 0 error)"
    assert sum(1 for line in lines if line.startswith("FAIL    rollout/raw_reward")) == 5
    assert "... 75 more result(s) of rollout/raw_reward not shown" in lines
    assert lines[-1].startswith("Every result: metric-gate show night-3 --all --max-results 240 (same --store)")

    _, out, _ = _run(capsys, "show", "night-3", "--store", store_url, "--table-rows", "1")
    assert sum(1 for line in out.splitlines() if line.startswith("FAIL    rollout/raw_reward")) == 1
    assert "... 79 more result(s) of rollout/raw_reward not shown" in out
    _, out, _ = _run(capsys, "show", "night-3", "--store", store_url, "--all")  # 200 of 240 results
    assert "40 result(s) left out of the verdict itself" in out
    assert "Every result: metric-gate show night-3 --all --max-results 240" in out
    _, out, _ = _run(capsys, "show", "night-3", "--store", store_url, "--all", "--max-results", "240")
    assert sum(1 for line in out.splitlines() if line.startswith("FAIL    rollout/raw_reward")) == 80
    assert sum(1 for line in out.splitlines() if line.startswith("PASS    train/grad_norm")) == 120
    assert "left out" not in out and "not shown" not in out and "Every result" not in out


def test_show_rebuilds_every_count_of_the_run_verdict(capsys, tmp_path, store_url):
    code, out, _ = _long_nights(capsys, tmp_path, store_url, "--json", "--max-results", "7")
    given = json.loads(out)
    VerdictSchema().load(given)
    assert given["truncated"] == 73
    code, out, _ = _run(capsys, "show", "night-3", "--json", "--store", store_url, "--max-results", "7")
    assert code == 0
    shown = json.loads(out)
    assert shown["counts"] == given["counts"] == {"PASS": 160, "FAIL": 80, "INACTIVE": 0, "ERROR": 0}
    assert shown["summary"] == given["summary"]
    (entry,) = shown["summary"]
    assert entry["counts"] == {"PASS": 40, "FAIL": 80, "INACTIVE": 0, "ERROR": 0}
    assert shown["results"] == given["results"] and shown["truncated"] == given["truncated"]


def test_a_misspelt_metric_gets_the_close_name_of_the_record(capsys, tmp_path, store_url):
    record = tmp_path / "night.jsonl"
    record.write_text(json.dumps({"metric": "eval/f1_score", "series": [[0, 0.5]]}) + "\n"
                      + json.dumps({"metric": "train/grad_norm", "series": [[0, 1.0]]}) + "\n")
    gates = tmp_path / "gates.json"
    gates.write_text(json.dumps([{"metric_key": "eval/f1_scroe", "steps": "last", "constraint": C},
                                 {"metric_key": "eval/unrelated", "steps": "last", "constraint": C}]))
    code, out, _ = _run(capsys, "run", record, "--gates", gates, "--store", store_url, "--json")
    assert code == 0
    reasons = {r["metric_key"]: r["reason"] for r in json.loads(out)["results"]}
    assert reasons["eval/f1_scroe"] == "metric 'eval/f1_scroe' is absent from the record; did you mean 'eval/f1_score'?"
    assert reasons["eval/unrelated"] == "metric 'eval/unrelated' is absent from the record"
