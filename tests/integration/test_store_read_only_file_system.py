"""Commands and operators that write refuse a SQLite store on a read-only file system: bad input, never retry.

The file system is made read-only for real: each case runs in a child process inside its own user
and mount namespaces (``unshare``), where the store's folder is bind-mounted read-only.  Where the
kernel allows no such namespace the tests are skipped.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import textwrap

import pytest

from airflow_metric_gate.store import open_store

UNSHARE = shutil.which("unshare")
GATES_YAML = "gates:\n  - metric_key: m\n    steps: all\n    constraint: {rel_up: 0.5, rel_down: 0.5}\n"


def _in_read_only(folder, argv, timeout=120):
    """Run ``argv`` with ``folder`` mounted read-only (a child process in its own namespaces)."""
    script = 'mount --bind "$1" "$1" && mount -o remount,bind,ro "$1" || exit 97; shift; exec "$@"'
    return subprocess.run([UNSHARE, "-rm", "sh", "-c", script, "sh", str(folder), *map(str, argv)],
                          capture_output=True, text=True, timeout=timeout)


@pytest.fixture
def folder(tmp_path):
    if UNSHARE is None:
        pytest.skip("no unshare")
    probe = _in_read_only(tmp_path, ["true"])
    if probe.returncode != 0:
        pytest.skip(f"cannot mount read-only in a user namespace here: {probe.stderr.strip()}")
    (tmp_path / "night.jsonl").write_text(json.dumps({"metric": "m", "series": [[0, 1.0], [1, 1.1]]}) + "\n")
    (tmp_path / "gates.yaml").write_text(GATES_YAML)
    with open_store(f"sqlite:///{tmp_path / 'existing.db'}") as store:
        store.upgrade()
    return tmp_path


CLI = [sys.executable, "-m", "airflow_metric_gate.cli"]


@pytest.mark.parametrize("name", ["existing.db", "new.db"])
@pytest.mark.parametrize(
    "argv",
    [["run", "{f}/night.jsonl", "--gates", "{f}/gates.yaml", "--run-id", "n1"], ["db", "upgrade"],
     ["mark-untrusted", "--run-id", "n1"], ["rebaseline", "--run-id", "n1"]],
    ids=["run", "db-upgrade", "mark-untrusted", "rebaseline"],
)
def test_writers_exit_2_not_3_on_a_read_only_file_system(folder, name, argv):
    args = [a.format(f=folder) for a in argv] + ["--store", f"sqlite:///{folder / name}"]
    proc = _in_read_only(folder, [*CLI, *args])
    assert proc.returncode == 2, proc.stderr
    assert "read-only" in proc.stderr and "retrying will not help" in proc.stderr
    assert "retry later" not in proc.stderr
    assert not (folder / "new.db").exists()


@pytest.mark.slow
def test_the_persist_task_fails_without_retry_on_a_read_only_file_system(folder):
    code = textwrap.dedent(f"""
        import os
        from datetime import datetime, timezone
        os.environ["AIRFLOW_CONN_METRIC_GATE_DB"] = "sqlite:///{folder / 'existing.db'}"
        from airflow.sdk.exceptions import AirflowFailException
        from airflow_metric_gate.declarations import declare
        from airflow_metric_gate.operators.persist import PersistValuesOperator
        from airflow_metric_gate.pipeline import selection_to_payload
        from airflow_metric_gate.selection import Selection
        gate = declare("m", steps="all", constraint={{"rel_up": 0.5, "rel_down": 0.5}})
        payload = selection_to_payload([Selection(gate, points=[(0, 1.0, 0)])])
        class TI:
            dag_id, run_id, task_id, map_index, try_number = "nightly", "scheduled__1", "t", -1, 1
        class DagRun:
            run_type = "scheduled"
            logical_date = run_after = datetime(2026, 11, 30, tzinfo=timezone.utc)
        context = {{"ti": TI(), "dag_run": DagRun(), "logical_date": DagRun.logical_date}}
        try:
            PersistValuesOperator(task_id="persist_values", selection=payload, series="rl").execute(context)
        except AirflowFailException as err:
            print("FAIL-NOW", err)
        except Exception as err:
            print("RETRY", type(err).__name__, err)
    """)
    proc = _in_read_only(folder, [sys.executable, "-c", code])
    assert "FAIL-NOW" in proc.stdout, proc.stdout + proc.stderr
    assert "read-only" in proc.stdout
