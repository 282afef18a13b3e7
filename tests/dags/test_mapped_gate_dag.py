"""examples/several_series_mapped.py: the metric_gate task group mapped over series identities, on Postgres.

One store run per map index, XCom routed per index, each series judged against its own history
only; a regression of one series fails only its own map index.
"""

from __future__ import annotations

import pytest
from _gate_data import store_query
from _several_series import NIGHTS, REWARD, SUITE, run_example_nights

pytestmark = [pytest.mark.airflow_db, pytest.mark.postgres]

EXAMPLE = "several_series_mapped.py"
DAG_ID = "gate_several_series_mapped"


def test_each_series_is_its_own_map_index_store_run_and_history(airflow_env, pg_url, tmp_path):
    results = run_example_nights(airflow_env, pg_url, tmp_path, EXAMPLE, DAG_ID, regressed=("rl-70b", NIGHTS[-1]))

    for night, result in zip(NIGHTS[:-1], results):
        assert result.state == "success", (night, result.output[-6000:])
        persisted = [result.xcom[f"metric_gate.persist_values[{i}]"] for i in range(2)]
        verdicts = [result.xcom[f"metric_gate.evaluate_gate[{i}]"] for i in range(2)]
        assert [p["series"] for p in persisted] == list(REWARD)
        assert persisted[0]["run_id"] != persisted[1]["run_id"]
        # The dicts name series, suite and path: backend is the task group's default.
        assert [(v["series"], v["backend"], v["suite"], v["run_id"]) for v in verdicts] == [
            (p["series"], "cuda", SUITE[p["series"]], p["run_id"]) for p in persisted
        ]
        assert all(v["trusted"] for v in verdicts), verdicts

    last = results[-1]  # rl-70b regressed: only its evaluate task fails; rl-7b passes on its own history
    assert last.state == "failed"
    assert last.task_state("metric_gate.evaluate_gate[0]") == "success"
    assert last.task_state("metric_gate.evaluate_gate[1]") == "failed"
    good, bad = last.xcom["metric_gate.evaluate_gate[0]"], last.xcom["metric_gate.evaluate_gate[1]"]
    # judged on its own history (2 trusted nights: calibrating under the calibrated policy the example uses)
    assert (good["series"], good["trusted"], good["counts"]["FAIL"]) == ("rl-7b", True, 0)
    assert {d["nights"] for d in good["declarations"]} == {2}
    assert (bad["series"], bad["trusted"]) == ("rl-70b", False)
    assert len([r for r in bad["results"] if r["status"] == "FAIL" and r["step"] is not None]) == 2
    assert [r["ref"] for r in bad["results"] if r["step"] is not None] == pytest.approx([REWARD["rl-70b"]] * 2)

    rows = store_query(pg_url, "SELECT series, suite, map_index, status, COUNT(*) FROM runs "
                               "GROUP BY series, suite, map_index, status ORDER BY series, status")
    assert rows == [("rl-70b", "nightly-64xh100", 1, "trusted", 2), ("rl-70b", "nightly-64xh100", 1, "untrusted", 1),
                    ("rl-7b", "nightly-8xh100", 0, "trusted", 3)]
