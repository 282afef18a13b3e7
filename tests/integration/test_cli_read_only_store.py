"""The commands that only read (``history``, ``runs``, ``show``, ``replay``) never write to a SQLite store.

They refuse a store file that does not exist, creating nothing.
"""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest

from airflow_metric_gate.cli import main
from airflow_metric_gate.declarations import declare
from airflow_metric_gate.pipeline import RunInfo, SeriesIdentity, evaluate, persist
from airflow_metric_gate.selection import Selection
from airflow_metric_gate.store import open_store

READ_ONLY = [["replay", "--series", "hand"], ["runs"], ["history", "m", "--series", "hand"], ["show", "n1"]]
GATE = declare("m", steps=[0], constraint={"rel_up": 0.1, "rel_down": 0.1})


def _run(capsys, *argv):
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


def _fill(path):
    """Two nights of series ``hand`` in a SQLite store at ``path``."""
    with open_store(f"sqlite:///{path}") as store:
        for day, value in enumerate([1.0, 2.0]):
            run = RunInfo(f"n{day + 1}", logical_date=datetime(2026, 6, 1, tzinfo=timezone.utc) + timedelta(days=day))
            persist(store, SeriesIdentity("hand"), run, [Selection(GATE, points=[(0, value, 0)])])
            evaluate(store, run.run_id)


@pytest.mark.parametrize("argv", READ_ONLY)
def test_a_missing_sqlite_store_is_refused_and_nothing_is_created(capsys, tmp_path, argv):
    path = tmp_path / "nodir" / "x.db"
    code, out, err = _run(capsys, *argv, "--store", f"sqlite:///{path}")
    assert code == 2, err
    assert f"metric-gate: error: no metric store at {path}" in err
    assert "nothing was stored" not in err and out == ""
    assert not path.parent.exists()


def test_a_writing_command_still_creates_the_store(capsys, tmp_path):
    path = tmp_path / "nodir" / "x.db"
    code, _, err = _run(capsys, "db", "upgrade", "--store", f"sqlite:///{path}")
    assert code == 0, err
    assert path.is_file()
    code, out, err = _run(capsys, "runs", "--store", f"sqlite:///{path}")
    assert code == 0, err
    assert out.strip() == "no stored runs"
