"""The training job's side: write the night's record, then emit the training output Asset with its night.

Stands in for the real training job (its last task).  The event's extra names the night
(``{"night": "YYYY-MM-DD"}``) and the gate DAG scheduled on the Asset takes its night from it.
"""

from __future__ import annotations

# [START complete]
import json
from pathlib import Path

import pendulum
from airflow.sdk import DAG, Asset, Param, task

#: What the training job produces each night: the gate DAG is scheduled on it.
TRAINING_OUTPUT = Asset(uri="file:///data/training/nightly/rl-7b", name="rl-7b-training-output")

with DAG(
    dag_id="assets_training_job",
    schedule=None,
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    catchup=False,
    params={
        "record_root": Param("/data/training/nightly", type="string"),
        "night": Param("2026-11-01", type="string", format="date"),
        "reward": Param(0.8, type="number"),
    },
    tags=["metric-gate"],
) as dag:

    @task(outlets=[TRAINING_OUTPUT])
    def write_metrics(record_root: str, night: str, reward: float, *, outlet_events=None) -> str:
        """Write the night's metrics (one JSON line per metric, then _SUCCESS) and name the night in the event."""
        folder, reward = Path(record_root) / night, float(reward)  # a rendered template is text
        folder.mkdir(parents=True, exist_ok=True)
        lines = [{"metric": "rollout/raw_reward", "series": [[0, reward], [1, reward]]},
                 {"metric": "train/grad_norm", "series": [[0, 1.0], [1, 1.0]]}]
        (folder / "part-0.jsonl").write_text("".join(json.dumps(line) + "\n" for line in lines))
        (folder / "_SUCCESS").touch()
        outlet_events[TRAINING_OUTPUT].extra = {"night": night}
        return str(folder)

    write_metrics("{{ params.record_root }}", "{{ params.night }}", "{{ params.reward }}")
# [END complete]
