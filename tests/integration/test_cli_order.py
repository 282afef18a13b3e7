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
