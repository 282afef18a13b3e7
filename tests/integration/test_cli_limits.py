"""``metric-gate`` exit statuses that tell the truth, and input limits checked before anything is stored.

Every bad input exits 2 with nothing stored (the store's row counts prove it), an unexpected error
exits 4 with one line (the traceback only under ``--debug``), and no message ever says "nothing was
stored" once a run was stored.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

from airflow_metric_gate.cli import main
from airflow_metric_gate.store import open_store

GATES_YAML = "gates:\n  - metric_key: m\n    steps: all\n    constraint: {rel_up: 0.5, rel_down: 0.5}\n"
CLI = [sys.executable, "-m", "airflow_metric_gate.cli"]


def _run(capsys, *argv):
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


def _gates(tmp_path, text=GATES_YAML, name="gates.yaml"):
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def _record(tmp_path, text, name="record.jsonl"):
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def _counts(store_url):
    with open_store(store_url) as store:
        return store.count("runs"), store.count("metric_values")


def _sqlite(tmp_path):
    return f"sqlite:///{tmp_path / 'store.db'}"


def _assert_bad_input(code, err, store_url):
    assert code == 2, err
    assert "Traceback" not in err
    assert "metric-gate: nothing was stored" in err
    assert _counts(store_url) == (0, 0)


# -- crashes are bad input, not tracebacks ------------------------------------------------------


@pytest.mark.parametrize("value", ["1e400", "1" + "0" * 400, "-" + "9" * 400])
def test_value_beyond_the_float_range_is_an_error_result_not_a_crash(capsys, tmp_path, value):
    record = _record(tmp_path, f'{{"metric": "m", "series": [[0, 1.0], [1, {value}]]}}\n')
    store_url = _sqlite(tmp_path)
    code, out, err = _run(capsys, "run", record, "--gates", _gates(tmp_path), "--store", store_url, "--json")
    assert code == 0, err
    verdict = json.loads(out)
    assert verdict["counts"]["ERROR"] == 1
    assert "not finite" in verdict["results"][0]["reason"]


def test_step_beyond_64_bits_is_bad_input_naming_file_and_line(capsys, tmp_path, store_url):
    lines = [{"metric": "m", "series": [[0, 1.0]]}, {"metric": "m", "series": [[2**63, 1.0]]}]
    record = _record(tmp_path, "".join(json.dumps(line) + "\n" for line in lines))
    code, _, err = _run(capsys, "run", record, "--gates", _gates(tmp_path), "--store", store_url)
    _assert_bad_input(code, err, store_url)
    assert f"{record}:2:" in err


def test_rows_step_beyond_64_bits_is_bad_input(capsys, tmp_path):
    record = _record(tmp_path, json.dumps({"step": 2**64, "m": 1.0}) + "\n")
    store_url = _sqlite(tmp_path)
    code, _, err = _run(capsys, "run", record, "--gates", _gates(tmp_path), "--store", store_url, "--format", "rows")
    _assert_bad_input(code, err, store_url)


def test_listed_step_beyond_64_bits_is_a_gates_file_error(capsys, tmp_path):
    gates = _gates(tmp_path, f"gates:\n  - metric_key: m\n    steps: [{2**63}]\n")
    record = _record(tmp_path, '{"metric": "m", "series": [[0, 1.0]]}\n')
    store_url = _sqlite(tmp_path)
    code, _, err = _run(capsys, "run", record, "--gates", gates, "--store", store_url)
    _assert_bad_input(code, err, store_url)
    assert f"{gates}:2:" in err


def test_steps_beyond_32_bits_are_stored_on_both_stores(capsys, tmp_path, store_url):
    big = [2**31, 2**40, 2**63 - 1]
    series = [[s, 1.0] for s in big]
    record = _record(tmp_path, json.dumps({"metric": "m", "series": series}) + "\n")
    code, _, err = _run(capsys, "run", record, "--gates", _gates(tmp_path), "--store", store_url, "--series", "s")
    assert code == 0, err
    with open_store(store_url) as store:
        assert sorted(r["step"] for r in store.history("m", series="s")) == big
    last = _gates(tmp_path, "gates:\n  - metric_key: m\n    steps: last\n    constraint: {rel_up: 1, rel_down: 1}\n",
                  name="last.yaml")
    code, _, err = _run(capsys, "run", record, "--gates", last, "--store", store_url, "--series", "t")
    assert code == 0, err
    with open_store(store_url) as store:
        assert [r["at_step"] for r in store.history("m", series="t")] == [2**63 - 1]


def test_deeply_nested_json_in_a_record_is_bad_input(capsys, tmp_path):
    deep = "[" * 100_000 + "]" * 100_000
    record = _record(tmp_path, f'{{"metric": "m", "series": [[0, 1.0]]}}\n{{"metric": "m", "series": [[1, {deep}]]}}\n')
    store_url = _sqlite(tmp_path)
    code, _, err = _run(capsys, "run", record, "--gates", _gates(tmp_path), "--store", store_url)
    _assert_bad_input(code, err, store_url)
    assert f"{record}:2:" in err and "nest" in err


def test_deeply_nested_json_gates_file_is_bad_input(capsys, tmp_path):
    deep = "[" * 100_000 + "]" * 100_000
    gates = _gates(tmp_path, f'{{"gates": {deep}}}', name="gates.json")
    record = _record(tmp_path, '{"metric": "m", "series": [[0, 1.0]]}\n')
    store_url = _sqlite(tmp_path)
    code, _, err = _run(capsys, "run", record, "--gates", gates, "--store", store_url)
    _assert_bad_input(code, err, store_url)
    assert str(gates) in err and "nest" in err


def test_deeply_nested_yaml_gates_file_is_bad_input(capsys, tmp_path):
    gates = _gates(tmp_path, "gates: " + "[" * 5_000 + "]" * 5_000 + "\n")
    record = _record(tmp_path, '{"metric": "m", "series": [[0, 1.0]]}\n')
    store_url = _sqlite(tmp_path)
    code, _, err = _run(capsys, "run", record, "--gates", gates, "--store", store_url)
    _assert_bad_input(code, err, store_url)
    assert str(gates) in err and "nest" in err


def test_recursive_yaml_alias_is_bad_input(capsys, tmp_path):
    gates = _gates(tmp_path, "gates: &a\n  - metric_key: m\n    steps: *a\n")
    record = _record(tmp_path, '{"metric": "m", "series": [[0, 1.0]]}\n')
    store_url = _sqlite(tmp_path)
    code, _, err = _run(capsys, "run", record, "--gates", gates, "--store", store_url)
    _assert_bad_input(code, err, store_url)
    assert f"{gates}:3:" in err and "alias" in err


BILLION_LAUGHS = textwrap.dedent("""\
    a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]
    b: &b [*a,*a,*a,*a,*a,*a,*a,*a,*a]
    c: &c [*b,*b,*b,*b,*b,*b,*b,*b,*b]
    d: &d [*c,*c,*c,*c,*c,*c,*c,*c,*c]
    e: &e [*d,*d,*d,*d,*d,*d,*d,*d,*d]
    f: &f [*e,*e,*e,*e,*e,*e,*e,*e,*e]
    g: &g [*f,*f,*f,*f,*f,*f,*f,*f,*f]
    h: &h [*g,*g,*g,*g,*g,*g,*g,*g,*g]
    i: &i [*h,*h,*h,*h,*h,*h,*h,*h,*h]
    gates: []
""")


def test_billion_laughs_yaml_is_refused_quickly_naming_file_and_line(tmp_path):
    gates = _gates(tmp_path, BILLION_LAUGHS)
    assert len(BILLION_LAUGHS.encode()) < 400
    record = _record(tmp_path, '{"metric": "m", "series": [[0, 1.0]]}\n')
    store_url = _sqlite(tmp_path)
    proc = subprocess.run([*CLI, "run", str(record), "--gates", str(gates), "--store", store_url],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2, proc.stderr
    assert f"{gates}:" in proc.stderr and "alias" in proc.stderr and "nodes" in proc.stderr
    assert _counts(store_url) == (0, 0)


# -- keys and dates: validated before the write ---------------------------------------------------


BAND = {"rel_up": 1, "rel_down": 1}


def _json_gates(tmp_path, *gates):
    return _gates(tmp_path, json.dumps({"gates": list(gates)}), name="gates.json")


@pytest.mark.parametrize(
    "metric_key, words",
    [
        ("m\ud800", "surrogate"),
        ("m\x00n", "NUL"),
        ("m" * 513, "512"),
        ("\u00e9" * 257, "512"),  # 514 bytes of UTF-8
    ],
)
def test_bad_metric_key_is_bad_input_on_both_stores(capsys, tmp_path, store_url, metric_key, words):
    gates = _json_gates(tmp_path, {"metric_key": metric_key, "steps": "all", "constraint": BAND})
    record = _record(tmp_path, json.dumps({"metric": metric_key, "series": [[0, 1.0]]}) + "\n")
    code, _, err = _run(capsys, "run", record, "--gates", gates, "--store", store_url)
    _assert_bad_input(code, err, store_url)
    assert words in err and str(gates) in err


def test_longest_metric_key_is_stored_on_both_stores(capsys, tmp_path, store_url):
    metric_key = "\u00e9" * 256  # 512 bytes of UTF-8
    gates = _json_gates(tmp_path, {"metric_key": metric_key, "steps": "all", "constraint": BAND})
    record = _record(tmp_path, json.dumps({"metric": metric_key, "series": [[0, 1.0]]}) + "\n")
    code, _, err = _run(capsys, "run", record, "--gates", gates, "--store", store_url)
    assert code == 0, err
    assert _counts(store_url) == (1, 1)


def test_steps_list_over_the_key_limit_is_bad_input(capsys, tmp_path, store_url):
    steps = list(range(100_000, 100_000 + 2_000))  # a 14 kB steps_key: over any index row limit
    gates = _json_gates(tmp_path, {"metric_key": "m", "steps": steps, "constraint": {"rel_up": 1, "rel_down": 1}})
    record = _record(tmp_path, json.dumps({"metric": "m", "series": [[s, 1.0] for s in steps]}) + "\n")
    code, _, err = _run(capsys, "run", record, "--gates", gates, "--store", store_url)
    _assert_bad_input(code, err, store_url)
    assert "steps" in err and str(gates) in err


@pytest.mark.parametrize("option", ["--series", "--backend", "--suite", "--run-id"])
@pytest.mark.parametrize("value", ["a\x00b", "x" * 513, "a\udcffb"])
def test_bad_identity_is_bad_input_on_both_stores(capsys, tmp_path, store_url, option, value):
    record = _record(tmp_path, '{"metric": "m", "series": [[0, 1.0]]}\n')
    code, _, err = _run(capsys, "run", record, "--gates", _gates(tmp_path), "--store", store_url, option, value)
    _assert_bad_input(code, err, store_url)
    assert option in err


@pytest.mark.parametrize("date", ["0999-12-31", "0001-01-01T00:00:00+00:00", "9999-12-31T23:00:00-05:00"])
def test_logical_date_out_of_range_is_bad_input(capsys, tmp_path, store_url, date):
    record = _record(tmp_path, '{"metric": "m", "series": [[0, 1.0]]}\n')
    code, _, err = _run(capsys, "run", record, "--gates", _gates(tmp_path), "--store", store_url,
                        "--logical-date", date)
    _assert_bad_input(code, err, store_url)
    assert "--logical-date" in err


def test_history_limit_above_its_bound_is_bad_input(capsys, tmp_path):
    from airflow_metric_gate.limits import MAX_HISTORY_LIMIT

    store_url = _sqlite(tmp_path)
    record = _record(tmp_path, '{"metric": "m", "series": [[0, 1.0]]}\n')
    code, _, err = _run(capsys, "run", record, "--gates", _gates(tmp_path), "--store", store_url,
                        "--history-limit", MAX_HISTORY_LIMIT + 1)
    _assert_bad_input(code, err, store_url)
    assert str(MAX_HISTORY_LIMIT) in err


@pytest.mark.slow
def test_history_limit_at_its_bound_works_with_that_many_baseline_runs(capsys, tmp_path):
    """The bound is one the store can serve: MAX_HISTORY_LIMIT baseline runs on SQLite."""
    from datetime import datetime, timedelta, timezone

    from airflow_metric_gate.declarations import declare
    from airflow_metric_gate.limits import MAX_HISTORY_LIMIT
    from airflow_metric_gate.pipeline import RunInfo, SeriesIdentity, persist
    from airflow_metric_gate.selection import Selection

    store_url = _sqlite(tmp_path)
    gate = declare("m", steps="all", constraint={"rel_up": 1, "rel_down": 1})
    start = datetime(2020, 1, 1, tzinfo=timezone.utc)
    with open_store(store_url) as store:
        for i in range(MAX_HISTORY_LIMIT + 5):
            run = RunInfo(f"r{i}", logical_date=start + timedelta(days=i))
            persist(store, SeriesIdentity("s"), run, [Selection(gate, [(0, 1.0, 0)])])
            store.set_status(f"r{i}", "trusted")
    record = _record(tmp_path, '{"metric": "m", "series": [[0, 1.0]]}\n')
    gates = _gates(tmp_path, "gates:\n  - metric_key: m\n    steps: all\n    constraint: {rel_up: 1, rel_down: 1}\n")
    code, out, err = _run(capsys, "run", record, "--gates", gates, "--store", store_url, "--series", "s", "--json",
                          "--all", "--history-limit", MAX_HISTORY_LIMIT)
    assert code == 0, err
    assert json.loads(out)["results"][0]["n"] == MAX_HISTORY_LIMIT


# -- honest messages after the write ---------------------------------------------------------------


def test_broken_pipe_after_the_write_exits_per_the_verdict(tmp_path):
    series = [[s, 1.0] for s in range(5_000)]
    record = _record(tmp_path, json.dumps({"metric": "m", "series": series}) + "\n")
    store_url = _sqlite(tmp_path)
    argv = [*CLI, "run", str(record), "--gates", str(_gates(tmp_path)), "--store", store_url, "--json", "--all",
            "--max-results", "100000", "--run-id", "piped"]
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert len(proc.stdout.read(10)) == 10  # what `| head -c 10` does
    proc.stdout.close()
    err = proc.stderr.read().decode()
    code = proc.wait(timeout=120)
    assert code == 0, err
    assert "nothing was stored" not in err and "Traceback" not in err
    with open_store(store_url) as store:
        assert store.get_run("piped").status == "trusted"


def test_unexpected_error_exits_4_with_one_line_and_a_traceback_only_under_debug(capsys, tmp_path, monkeypatch):
    import airflow_metric_gate.cli as cli

    def boom(verdict, **kwargs):
        raise RuntimeError("table broke")

    monkeypatch.setattr(cli, "render_report", boom)
    record = _record(tmp_path, '{"metric": "m", "series": [[0, 1.0]]}\n')
    store_url = _sqlite(tmp_path)
    argv = ["run", record, "--gates", _gates(tmp_path), "--store", store_url, "--run-id", "r1"]
    code, _, err = _run(capsys, *argv)
    assert code == 4
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert "metric-gate run" in lines[0] and "bug" in lines[0] and "--debug" in lines[0]
    assert "nothing was stored" not in err and "Traceback" not in err
    code, _, err = _run(capsys, "--debug", *argv)
    assert code == 4
    assert "Traceback" in err and "RuntimeError: table broke" in err


@pytest.mark.parametrize("error", [ValueError("bad unpack"), OSError("bad descriptor"), KeyError("k")])
def test_a_plain_value_or_os_error_is_a_bug_not_bad_input(capsys, tmp_path, monkeypatch, error):
    """Only the package's own bad-input errors exit 2; a bare ValueError or OSError is internal (4)."""
    import airflow_metric_gate.cli as cli

    def broken(path):
        raise error

    monkeypatch.setattr(cli, "load_gates_file", broken)
    record = _record(tmp_path, '{"metric": "m", "series": [[0, 1.0]]}\n')
    code, _, err = _run(capsys, "run", record, "--gates", _gates(tmp_path), "--store", _sqlite(tmp_path))
    assert code == 4, err
    assert "internal error" in err and "nothing was stored" not in err


def test_an_unusable_demo_working_folder_is_bad_input(capsys, tmp_path):
    taken = tmp_path / "a-file"
    taken.write_text("")
    code, _, err = _run(capsys, "demo", "--workdir", str(taken / "work"))
    assert code == 2, err
    assert str(taken) in err and "working folder" in err and "internal error" not in err


def test_store_outage_after_the_write_does_not_claim_nothing_was_stored(capsys, tmp_path, monkeypatch):
    from airflow_metric_gate.store import StoreUnavailable
    from airflow_metric_gate.store.base import MetricStore

    def down(self, *args, **kwargs):
        raise StoreUnavailable("database is locked")

    monkeypatch.setattr(MetricStore, "set_status", down)
    record = _record(tmp_path, '{"metric": "m", "series": [[0, 1.0]]}\n')
    store_url = _sqlite(tmp_path)
    code, _, err = _run(capsys, "run", record, "--gates", _gates(tmp_path), "--store", store_url, "--run-id", "r1")
    assert code == 3
    assert "nothing was stored" not in err
    assert "r1" in err and "pending" in err


# -- special files ---------------------------------------------------------------------------------


def test_fifo_as_the_record_is_refused_without_blocking(tmp_path):
    fifo = tmp_path / "record.jsonl"
    os.mkfifo(fifo)
    store_url = _sqlite(tmp_path)
    proc = subprocess.run([*CLI, "run", str(fifo), "--gates", str(_gates(tmp_path)), "--store", store_url],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2, proc.stderr
    assert str(fifo) in proc.stderr and "not a regular file" in proc.stderr


def test_fifo_as_the_gates_file_is_refused_without_blocking(tmp_path):
    fifo = tmp_path / "gates.yaml"
    os.mkfifo(fifo)
    record = _record(tmp_path, '{"metric": "m", "series": [[0, 1.0]]}\n')
    proc = subprocess.run([*CLI, "run", str(record), "--gates", str(fifo), "--store", _sqlite(tmp_path)],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2, proc.stderr
    assert str(fifo) in proc.stderr and "not a regular file" in proc.stderr


def test_special_file_in_a_record_directory_is_refused(tmp_path):
    folder = tmp_path / "night"
    folder.mkdir()
    _record(folder, '{"metric": "m", "series": [[0, 1.0]]}\n', name="rank0.jsonl")
    os.mkfifo(folder / "rank1.jsonl")
    store_url = _sqlite(tmp_path)
    proc = subprocess.run([*CLI, "run", str(folder), "--gates", str(_gates(tmp_path)), "--store", store_url],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2, proc.stderr
    assert str(folder / "rank1.jsonl") in proc.stderr and "not a regular file" in proc.stderr
    assert _counts(store_url) == (0, 0)


@pytest.mark.parametrize("kind", ["dangling", "loop"])
def test_broken_symlink_in_a_record_directory_is_refused(capsys, tmp_path, kind):
    folder = tmp_path / "night"
    folder.mkdir()
    _record(folder, '{"metric": "m", "series": [[0, 1.0]]}\n', name="rank0.jsonl")
    link = folder / "rank1.jsonl"
    if kind == "dangling":
        link.symlink_to(tmp_path / "gone.jsonl")
    else:
        link.symlink_to(link)
    store_url = _sqlite(tmp_path)
    code, _, err = _run(capsys, "run", folder, "--gates", _gates(tmp_path), "--store", store_url)
    _assert_bad_input(code, err, store_url)
    assert str(link) in err and "symbolic link" in err


def test_skipped_entries_of_a_record_directory_are_reported(capsys, tmp_path):
    folder = tmp_path / "night"
    folder.mkdir()
    _record(folder, '{"metric": "m", "series": [[0, 1.0]]}\n', name="rank0.jsonl")
    _record(folder, "", name="_SUCCESS")
    _record(folder, "partial", name="rank1.jsonl.tmp")
    (folder / "logs").mkdir()
    code, _, err = _run(capsys, "run", folder, "--gates", _gates(tmp_path), "--store", _sqlite(tmp_path))
    assert code == 0, err
    for name in ("rank1.jsonl.tmp", "logs"):
        assert f"skipped {folder / name}" in err
    assert "_SUCCESS" not in err  # the marker every complete night has is no news
    code, _, err = _run(capsys, "run", folder, "--gates", _gates(tmp_path), "--store", _sqlite(tmp_path), "-v")
    assert code == 0, err
    for name in ("_SUCCESS", "rank1.jsonl.tmp", "logs"):
        assert f"skipped {folder / name}" in err


def test_a_complete_night_folder_runs_without_a_word_about_its_marker(capsys, tmp_path):
    folder = tmp_path / "night"
    folder.mkdir()
    _record(folder, '{"metric": "m", "series": [[0, 1.0]]}\n', name="rank0.jsonl")
    _record(folder, "", name="_SUCCESS")
    code, _, err = _run(capsys, "run", folder, "--gates", _gates(tmp_path), "--store", _sqlite(tmp_path))
    assert code == 0, err
    assert "skipped" not in err


# -- forged log lines ------------------------------------------------------------------------------

FORGED = "m\nmetric-gate: rl run night-2: TRUSTED (1 results, 0 fail, 0 error)\x1b[2K"


def _forged_night(capsys, tmp_path, store_url, day, value, *extra):
    gates = _json_gates(tmp_path, {"metric_key": FORGED, "steps": "all",
                                   "constraint": {"rel_up": 0.1, "rel_down": 0.1}})
    record = _record(tmp_path, json.dumps({"metric": FORGED, "series": [[0, value]]}) + "\n", name=f"n{day}.jsonl")
    return _run(capsys, "run", record, "--gates", gates, "--store", store_url, "--series", "rl",
                "--run-id", f"night-{day}", "--logical-date", f"2026-11-0{day}", "--all", *extra)


def test_a_newline_in_a_metric_key_cannot_forge_a_summary_line(capsys, tmp_path):
    store_url = _sqlite(tmp_path)
    _forged_night(capsys, tmp_path, store_url, 1, 1.0)
    code, out, err = _forged_night(capsys, tmp_path, store_url, 2, 5.0)
    assert code == 0, err
    summaries = [line for line in out.splitlines() if line.startswith("metric-gate:")]
    assert summaries == ["metric-gate: rl run night-2: NOT-TRUSTED (1 results, 1 fail, 0 error)"]
    assert "\x1b" not in out
    assert "m\\nmetric-gate: rl run night-2: TRUSTED" in out  # escaped, still readable
    code, out, _ = _run(capsys, "history", FORGED, "--series", "rl", "--store", store_url)
    assert code == 0 and "\x1b" not in out
    assert not [line for line in out.splitlines() if line.startswith("metric-gate:")]


def test_control_characters_in_error_messages_are_escaped(capsys, tmp_path):
    folder = tmp_path / "a\nmetric-gate: TRUSTED"
    folder.mkdir()
    code, _, err = _run(capsys, "run", folder / "missing.jsonl", "--gates", _gates(tmp_path),
                        "--store", _sqlite(tmp_path))
    assert code == 2
    assert not [line for line in err.splitlines() if line.startswith("metric-gate: TRUSTED")]
    assert "a\\nmetric-gate: TRUSTED" in err


def test_control_characters_in_the_runs_table_are_escaped(capsys, tmp_path):
    store_url = _sqlite(tmp_path)
    _forged_night(capsys, tmp_path, store_url, 1, 1.0)
    code, _, err = _run(capsys, "mark-untrusted", "--run-id", "night-1", "--reason", "bad\nmetric-gate: TRUSTED",
                        "--store", store_url)
    assert code == 0, err
    code, out, _ = _run(capsys, "runs", "--store", store_url)
    assert code == 0
    assert len(out.strip().splitlines()) == 2  # header and one run
    assert "bad\\nmetric-gate: TRUSTED" in out


def test_yaml_aliases_to_a_shared_band_are_accepted(capsys, tmp_path):
    gates = _gates(tmp_path, textwrap.dedent("""\
        gates:
          - metric_key: &name m
            steps: all
            constraint: &band {rel_up: 0.5, rel_down: 0.5}
          - metric_key: *name
            steps: last
            constraint: *band
    """))
    record = _record(tmp_path, '{"metric": "m", "series": [[0, 1.0]]}\n')
    store_url = _sqlite(tmp_path)
    code, _, err = _run(capsys, "run", record, "--gates", gates, "--store", store_url)
    assert code == 0, err
    assert _counts(store_url) == (1, 2)


@pytest.mark.parametrize("argv", [["history", "m", "--series", "s", "--step", str(2**63)],
                                  ["history", "m", "--series", "s", "--limit", str(2**64)],
                                  ["runs", "--limit", str(2**64)]])
def test_integer_options_beyond_64_bits_are_usage_errors(capsys, tmp_path, argv):
    code, _, err = _run(capsys, *argv, "--store", _sqlite(tmp_path))
    assert code == 2, err
    assert "Traceback" not in err and "internal error" not in err


def test_every_key_at_its_limit_is_stored_on_both_stores(capsys, tmp_path, store_url):
    from airflow_metric_gate.declarations import canonical_key
    from airflow_metric_gate.limits import MAX_NAME_BYTES, MAX_STEPS_KEY_BYTES

    steps = list(range(100_000, 100_146))
    assert len(canonical_key(steps)) == MAX_STEPS_KEY_BYTES - 1
    constraint = {k: 1.2345678901234567e-300 for k in ("rel_up", "abs_floor_up", "rel_down", "abs_floor_down")}
    metric_key = "\u00e9" * 256
    gates = _json_gates(tmp_path, {"metric_key": metric_key, "steps": steps, "constraint": constraint})
    record = _record(tmp_path, json.dumps({"metric": metric_key, "series": [[s, 1.0] for s in steps]}) + "\n")
    name = "n" * MAX_NAME_BYTES
    code, _, err = _run(capsys, "run", record, "--gates", gates, "--store", store_url, "--series", name,
                        "--backend", name, "--suite", name, "--run-id", name, "--commit", name)
    assert code == 0, err
    assert _counts(store_url) == (1, len(steps))


@pytest.mark.parametrize("value", [0, 501])
def test_replay_history_limit_is_checked_like_run_and_show(capsys, tmp_path, value):
    code, _, err = _run(capsys, "replay", "--series", "s", "--history-limit", value, "--store", _sqlite(tmp_path))
    assert code == 2, err
    assert f"argument --history-limit: must be from 1 to 500, got {value}" in err


@pytest.mark.parametrize("argv", [["run", "r.jsonl", "--gates", "g.yaml", "--history-limit"],
                                  ["run", "r.jsonl", "--gates", "g.yaml", "--max-results"],
                                  ["history", "m", "--series", "s", "--step"],
                                  ["history", "m", "--series", "s", "--limit"],
                                  ["runs", "--limit"],
                                  ["show", "r", "--table-rows"],
                                  ["replay", "--series", "s", "--history-limit"],
                                  ["replay", "--series", "s", "--min-history"],
                                  ["demo", "--nights"]])
def test_a_non_integer_option_is_named_plainly(capsys, argv):
    code, _, err = _run(capsys, *argv, "1.5x")
    assert code == 2, err
    option = argv[-1]
    assert f"argument {option}: not an integer: '1.5x'" in err
    assert "invalid" not in err  # not argparse's "invalid _positive value"
