"""Records, series and DAG runs shared by the several-series DAG tests (examples/several_series_*.py)."""

from __future__ import annotations

import shutil
from pathlib import Path

from _gate_data import write_record

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
REWARD = {"rl-7b": 0.8, "rl-70b": 0.3}  # far apart: each is a regression in the other's band
SUITE = {"rl-7b": "nightly-8xh100", "rl-70b": "nightly-64xh100"}
NIGHTS = ("2026-11-01", "2026-11-02", "2026-11-03")


def write_nights(root: Path, nights, reward, regressed: tuple[str, str] | None = None) -> None:
    """Write ``<root>/<series>/<night>/part-0.jsonl`` and its ``_SUCCESS`` marker for every series and night.

    :param root: the record root.
    :param nights: the nights.
    :param reward: series -> its steady reward.
    :param regressed: ``(series, night)`` whose reward collapses.
    """
    for night in nights:
        for series, value in reward.items():
            value = value / 2 if regressed == (series, night) else value
            lines = [{"metric": "rollout/raw_reward", "series": [[0, value], [1, value]]},
                     {"metric": "train/grad_norm", "series": [[0, 1.0], [1, 1.0]]}]
            write_record(root / series / night, {"part-0.jsonl": lines})


def run_example_nights(airflow_env, pg_url: str, tmp_path: Path, example: str, dag_id: str, *,
                       regressed: tuple[str, str]) -> list:
    """Run an example DAG as baseline for every night of ``NIGHTS``, in order, on the Postgres store.

    The records hold every series of ``REWARD`` for every night; the example file is copied into the
    scratch DAG bundle and the store sits behind ``AIRFLOW_CONN_METRIC_GATE_DB``.

    :param airflow_env: the ``airflow_env`` fixture.
    :param pg_url: the store's URL (the ``pg_url`` fixture).
    :param tmp_path: the test's temporary folder (the records go to ``records/`` below it).
    :param example: the file name under ``examples/``.
    :param dag_id: the example's DAG id.
    :param regressed: ``(series, night)`` whose reward collapses.
    :returns: one ``DagRunResult`` per night, in the order of ``NIGHTS``.
    """
    root = tmp_path / "records"
    write_nights(root, NIGHTS, REWARD, regressed=regressed)
    dag_file = airflow_env.scratch_dags / example
    shutil.copy(EXAMPLES / example, dag_file)
    return airflow_env.dag_tests(
        [{"dag_id": dag_id, "dag_file": dag_file, "logical_date": f"{night}T00:00:00+00:00",
          "conf": {"record_root": str(root), "role": "baseline"}} for night in NIGHTS],
        env={"AIRFLOW_CONN_METRIC_GATE_DB": pg_url},
        timeout=1200,
    )
