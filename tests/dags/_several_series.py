"""Records and store queries shared by the several-series DAG tests (examples/several_series_*.py)."""

from __future__ import annotations

import json
from pathlib import Path


def write_nights(root: Path, nights, reward, regressed: tuple[str, str] | None = None) -> None:
    """Write ``<root>/<series>/<night>/part-0.jsonl`` and its ``_SUCCESS`` marker for every series and night.

    :param root: the record root.
    :param nights: the nights.
    :param reward: series -> its steady reward.
    :param regressed: ``(series, night)`` whose reward collapses.
    """
    for night in nights:
        for series, value in reward.items():
            folder = root / series / night
            folder.mkdir(parents=True)
            value = value / 2 if regressed == (series, night) else value
            lines = [{"metric": "rollout/raw_reward", "series": [[0, value], [1, value]]},
                     {"metric": "train/grad_norm", "series": [[0, 1.0], [1, 1.0]]}]
            (folder / "part-0.jsonl").write_text("".join(json.dumps(line) + "\n" for line in lines))
            (folder / "_SUCCESS").touch()


def query(url: str, sql: str, *params):
    import psycopg2

    conn = psycopg2.connect(url)
    try:
        with conn.cursor() as cur:
            cur.execute(sql, params)
            return cur.fetchall()
    finally:
        conn.close()
