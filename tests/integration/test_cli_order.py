"""``metric-gate run`` on both stores: strict JSON verdicts, and nights judged in date order."""

from __future__ import annotations

import json

import pytest

from airflow_metric_gate.cli import main
from airflow_metric_gate.store import open_store

GATES_YAML = """\
gates:
  - metric_key: rollout/raw_reward
    steps: all
    constraint: {rel_up: 0.2, rel_down: 0.2}
"""


def _strict(text):
    def refuse(token):
        raise ValueError(f"not strict JSON: {token}")

    return json.loads(text, parse_constant=refuse)


def _night(capsys, tmp_path, store_url, day, rewards, *extra):
    record = tmp_path / f"night{day}.jsonl"
    record.write_text(json.dumps({"metric": "rollout/raw_reward", "series": list(enumerate(rewards))}) + "\n")
    gates = tmp_path / "gates.yaml"
    gates.write_text(GATES_YAML)
    code = main(["run", str(record), "--gates", str(gates), "--series", "rl", "--store", store_url,
                 "--run-id", f"night-{day}", "--logical-date", f"2026-11-{day:02d}T00:00:00Z", *map(str, extra)])
    out, err = capsys.readouterr()
    return code, out, err


def test_json_verdict_is_strict_when_the_baseline_sum_overflows(capsys, tmp_path, store_url):
    for day in (1, 2, 3):
        code, _, err = _night(capsys, tmp_path, store_url, day, [1.5e308, 1.0])
        assert code == 0, err
    code, out, err = _night(capsys, tmp_path, store_url, 4, [1.5e308, 1.0], "--json", "--all")
    verdict = _strict(out)
    assert code == 0, err
    assert verdict["counts"]["ERROR"] == 1
    assert verdict["results"][0]["ref"] is None and "overflow" in verdict["results"][0]["reason"]


def _pending_night_two(capsys, tmp_path, store_url):
    """Night 1 judged and trusted; night 2 stored but not judged yet (what a backfill leaves behind)."""
    for day in (1, 2):
        code, _, err = _night(capsys, tmp_path, store_url, day, [0.5, 0.5])
        assert code == 0, err
    with open_store(store_url) as store:
        store.set_status("night-2", "pending")


def test_night_with_an_earlier_night_pending_exits_3_naming_it_and_stays_pending(capsys, tmp_path, store_url):
    _pending_night_two(capsys, tmp_path, store_url)
    code, out, err = _night(capsys, tmp_path, store_url, 3, [0.5, 0.5], "--json")
    assert code == 3
    assert out == ""
    assert "night-2" in err and "2026-11-02" in err
    assert "--run-id night-3" in err and "--wait" in err
    with open_store(store_url) as store:
        assert store.get_run("night-3").status == "pending"  # stored, judged by a re-run
        assert store.count("metric_values", "night-3") == 2

    code, _, err = _night(capsys, tmp_path, store_url, 2, [0.5, 0.5])  # night 2 judged ...
    assert code == 0, err
    code, out, err = _night(capsys, tmp_path, store_url, 3, [0.5, 0.5], "--json", "--all")  # ... then night 3
    assert code == 0, err
    assert {r["n"] for r in _strict(out)["results"]} == {2}  # judged against both earlier nights


def test_wait_polls_until_the_earlier_night_is_judged(capsys, tmp_path, store_url):
    import threading

    _pending_night_two(capsys, tmp_path, store_url)

    def judge_night_two():
        with open_store(store_url) as store:
            store.set_status("night-2", "trusted")

    timer = threading.Timer(0.5, judge_night_two)
    timer.start()
    try:
        code, out, err = _night(capsys, tmp_path, store_url, 3, [0.5, 0.5], "--json", "--all", "--wait", "30")
    finally:
        timer.cancel()
    assert code == 0, err
    assert {r["n"] for r in _strict(out)["results"]} == {2}


def test_wait_times_out_with_exit_3(capsys, tmp_path, store_url):
    _pending_night_two(capsys, tmp_path, store_url)
    code, out, err = _night(capsys, tmp_path, store_url, 3, [0.5, 0.5], "--wait", "0.2")
    assert code == 3
    assert "night-2" in err and "0.2" in err
    with open_store(store_url) as store:
        assert store.get_run("night-3").status == "pending"


@pytest.mark.parametrize("bad", ["-1", "nan", "soon"])
def test_wait_must_be_a_number_of_seconds(capsys, tmp_path, store_url, bad):
    code, _, err = _night(capsys, tmp_path, store_url, 1, [0.5], "--wait", bad)
    assert code == 2 and "--wait" in err
