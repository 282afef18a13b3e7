"""Records of training nights and queries on the metric store, shared by the DAG and system tests.

``tests/`` holds a ``conftest.py`` and no ``__init__.py``, so pytest puts it on ``sys.path``: the
test folders below it import this module by name, as they do ``fake_postgres``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

#: One clean night of the nightly DAG's gates (``dags/nightly_metric_gate.py``).
NIGHTLY_VALUES = {"train/grad_norm": 1.0, "train/ppo_kl": 0.05, "rollout/raw_reward": 0.8}
#: The TITO mismatch rate the nightly DAG gates on its last value.
TITO_METRIC = "rollout/tito_session_mismatch_rate/v1/assistant_text"


def jsonl_text(lines: list[dict[str, Any]]) -> str:
    """Return lines of a record file: one JSON object a line.

    :param lines: the JSON objects.
    """
    return "".join(json.dumps(line) + "\n" for line in lines)


def write_record(folder: Path, files: dict[str, list[dict[str, Any]]]) -> None:
    """Write one record directory as SPEC section 2 has it: JSON-lines files, then the ``_SUCCESS`` marker.

    :param folder: the record directory (created, with its parents; it must not exist yet).
    :param files: file name -> its lines, each a JSON object.
    """
    folder.mkdir(parents=True)
    for name, lines in files.items():
        (folder / name).write_text(jsonl_text(lines))
    (folder / "_SUCCESS").touch()  # last, as a training job writes it


def night_files(values: dict[str, float]) -> dict[str, list[dict[str, Any]]]:
    """Return a night's files as the nightly DAG reads them: two training processes share steps 0-3.

    Rank 0 writes the even steps of every metric, rank 1 the odd ones, and each of them the TITO
    rate's value at step 3.

    :param values: metric key -> its value at every step.
    :returns: file name -> its lines.
    """
    files = {}
    for rank in range(2):
        steps = range(rank, 4, 2)
        lines = [{"metric": m, "series": [[s, v] for s in steps]} for m, v in values.items()]
        lines.append({"metric": TITO_METRIC, "series": [[3, 0.01]]})
        files[f"rank{rank}.jsonl"] = lines
    return files


def write_night(folder: Path, values: dict[str, float]) -> None:
    """Write a night of :func:`night_files` into a record directory, the marker last.

    :param folder: the record directory.
    :param values: metric key -> its value at every step.
    """
    write_record(folder, night_files(values))


def store_query(url: str, sql: str, *params: Any) -> list[tuple]:
    """Run one query on a Postgres metric store (``%s`` placeholders) and return its rows.

    :param url: the store's ``postgresql://`` URL.
    :param sql: the statement.
    :param params: its parameters.
    """
    import psycopg2

    conn = psycopg2.connect(url, connect_timeout=10)
    try:
        with conn.cursor() as cur:
            cur.execute(sql, params)
            return cur.fetchall()
    finally:
        conn.close()
