"""examples/several_series_chains.py: one explicit chain per series in one DAG, on Postgres.

Two chains in one DAG run keep two store runs and two histories; a regression of one series fails
only its own chain.
"""

from __future__ import annotations

import pytest
from _gate_data import store_query
from _several_series import NIGHTS, REWARD, SUITE, run_example_nights

pytestmark = [pytest.mark.airflow_db, pytest.mark.postgres]

EXAMPLE = "several_series_chains.py"
DAG_ID = "gate_several_series_chains"


def test_two_series_chains_in_one_dag_run_keep_their_histories_apart(airflow_env, pg_url, tmp_path):
    results = run_example_nights(airflow_env, pg_url, tmp_path, EXAMPLE, DAG_ID, regressed=("rl-7b", NIGHTS[-1]))

    for night, result in zip(NIGHTS[:-1], results):
        assert result.state == "success", (night, result.output[-6000:])
        persisted = {series: result.xcom[f"persist_values_{series}"] for series in REWARD}
        assert persisted["rl-7b"]["run_id"] != persisted["rl-70b"]["run_id"]
        for series in REWARD:
            verdict = result.xcom[f"evaluate_gate_{series}"]
            assert (verdict["series"], verdict["suite"]) == (series, SUITE[series])
            assert verdict["run_id"] == persisted[series]["run_id"]
            assert verdict["trusted"] is True, verdict

    last = results[-1]
    assert last.state == "failed"
    assert last.task_state("evaluate_gate_rl-7b") == "failed"
    assert last.task_state("evaluate_gate_rl-70b") == "success"
    good = last.xcom["evaluate_gate_rl-70b"]
    assert good["trusted"] is True and good["counts"]["FAIL"] == good["counts"]["ERROR"] == 0
    assert {d["nights"] for d in good["declarations"]} == {2}  # its own two nights, never the other chain's
    bad = last.xcom["evaluate_gate_rl-7b"]
    steps = [r for r in bad["results"] if r["step"] is not None]
    assert {(r["metric_key"], r["status"], r["n"]) for r in steps} == {("rollout/raw_reward", "FAIL", 2)}
    assert [r["ref"] for r in steps] == pytest.approx([REWARD["rl-7b"]] * 2)

    rows = store_query(pg_url, "SELECT series, status, COUNT(*) FROM runs "
                               "GROUP BY series, status ORDER BY series, status")
    assert rows == [("rl-70b", "trusted", 3), ("rl-7b", "trusted", 2), ("rl-7b", "untrusted", 1)]
    tasks = store_query(pg_url, "SELECT DISTINCT series, provenance::json->>'task_id' FROM runs ORDER BY 1")
    assert tasks == [("rl-70b", "persist_values_rl-70b"), ("rl-7b", "persist_values_rl-7b")]
