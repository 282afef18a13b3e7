"""The commands that only read (``history``, ``runs``, ``show``, ``replay``) never write to a SQLite store.

They refuse a store file that does not exist (creating nothing), read a file they cannot write, and
leave the schema of an older store as it is.
"""

from __future__ import annotations

import os
import shutil
import sqlite3
import stat
import subprocess
import sys
from datetime import datetime, timedelta, timezone

import pytest

from airflow_metric_gate.cli import main
from airflow_metric_gate.declarations import declare
from airflow_metric_gate.pipeline import RunInfo, SeriesIdentity, evaluate, persist
from airflow_metric_gate.selection import Selection
from airflow_metric_gate.store import open_store
from airflow_metric_gate.store.schema import SCHEMA_VERSION, SCHEMA_VERSION_TABLE, migration_statements

READ_ONLY = [["replay", "--series", "hand"], ["runs"], ["history", "m", "--series", "hand"], ["show", "n1"]]
CLI = [sys.executable, "-m", "airflow_metric_gate.cli"]
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


def _create_v1(path):
    """A store as version 1 of the package left it."""
    with open_store(f"sqlite:///{path}") as store, store._transaction(schema=False) as cur:
        for statement in migration_statements(1, store.dialect):
            store._execute(cur, statement)
        store._execute(cur, f"INSERT INTO {SCHEMA_VERSION_TABLE} (version, upgraded_at) VALUES (1, %s)",
                       (store._ts(datetime.now(timezone.utc)),))


def test_an_older_schema_is_reported_and_left_as_it_is(capsys, tmp_path):
    path = tmp_path / "old.db"
    _create_v1(path)
    for argv in READ_ONLY:
        code, _, err = _run(capsys, *argv, "--store", f"sqlite:///{path}")
        assert code == 2, err
        assert f"schema version 1, older than this package's {SCHEMA_VERSION}" in err
        assert "metric-gate db upgrade" in err
    with open_store(f"sqlite:///{path}") as store:
        assert store.schema_version() == 1  # not upgraded by a command that only reads


def test_a_file_that_is_no_metric_store_is_reported(capsys, tmp_path):
    path = tmp_path / "empty.db"
    path.write_bytes(b"")
    code, _, err = _run(capsys, "runs", "--store", f"sqlite:///{path}")
    assert code == 2, err
    assert f"{path}) has no metric-gate tables" in err
    assert path.read_bytes() == b""


# -- a store this user cannot write ------------------------------------------------------------------

#: Root ignores file permissions; without these capabilities it is held to them like any user.
_DROP_OVERRIDES = ["setpriv", "--bounding-set=-dac_override,-dac_read_search,-fowner"]


def _as_a_user_held_to_permissions():
    """The command prefix that runs a process subject to file permissions (skips when there is none)."""
    if os.geteuid() != 0:
        return []
    if shutil.which("setpriv") is None:
        pytest.skip("running as root and setpriv is missing: cannot drop the permission override")
    return _DROP_OVERRIDES


_READ_ONLY_FILE = stat.S_IRUSR | stat.S_IRGRP | stat.S_IROTH
_READ_ONLY_FOLDER = _READ_ONLY_FILE | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH


@pytest.fixture
def locked_store(tmp_path):
    """A store of two nights, and ``lock(folder=True)``: make its file read-only (0444), its folder too (0555).

    Yields ``(prefix, path, lock)``: ``prefix`` runs a command as a user held to file permissions.
    """
    folder = tmp_path / "store"
    folder.mkdir()
    path = folder / "store.db"
    _fill(path)
    assert not os.path.exists(f"{path}-wal") and not os.path.exists(f"{path}-shm")  # closed cleanly
    prefix = _as_a_user_held_to_permissions()

    def lock(folder_too=True):
        path.chmod(_READ_ONLY_FILE)
        if folder_too:
            folder.chmod(_READ_ONLY_FOLDER)
        target = folder / "probe" if folder_too else path
        probe = subprocess.run([*prefix, sys.executable, "-c", f"open({str(target)!r}, 'a')"], capture_output=True)
        if probe.returncode == 0:
            pytest.skip("this process can write what is read-only: cannot test an unwritable store")

    try:
        yield prefix, path, lock
    finally:
        folder.chmod(stat.S_IRWXU)
        path.chmod(stat.S_IRUSR | stat.S_IWUSR)


def _cli(prefix, *argv):
    proc = subprocess.run([*prefix, *CLI, *argv], capture_output=True, text=True, timeout=120)
    return proc.returncode, proc.stdout, proc.stderr


def _read_everything(prefix, path):
    url = f"sqlite:///{path}"
    code, out, err = _cli(prefix, "runs", "--store", url)
    assert code == 0, err
    assert [line.split()[1] for line in out.splitlines()[1:]] == ["n2", "n1"]
    code, out, err = _cli(prefix, "history", "m", "--series", "hand", "--store", url)
    assert code == 0, err
    assert "n1" in out and "n2" in out
    code, out, err = _cli(prefix, "show", "n2", "--store", url)
    assert code == 0, err
    assert "hand run n2" in out
    code, out, err = _cli(prefix, "replay", "--series", "hand", "--store", url)
    assert code == 0, err
    assert "1 of 2 night(s) would fail" in out


def test_commands_that_read_work_on_a_store_this_user_cannot_write(locked_store):
    prefix, path, lock = locked_store
    lock(folder_too=False)
    before = path.read_bytes()
    _read_everything(prefix, path)
    assert path.read_bytes() == before


def test_a_store_whose_folder_is_not_writable_either_is_refused_not_misread(locked_store):
    # SQLite must create store.db-shm to read a WAL file safely; it cannot, so the store is refused
    prefix, path, lock = locked_store
    lock(folder_too=True)
    for argv in READ_ONLY:
        code, out, err = _cli(prefix, *argv, "--store", f"sqlite:///{path}")
        assert code == 2, (argv, err)
        assert f"cannot read the metric store {path}: SQLite needs to create {path}-shm" in err, err
        assert out == ""
    assert sorted(os.listdir(path.parent)) == ["store.db"]


def test_a_writer_still_at_work_is_read_with_its_latest_changes(locked_store):
    prefix, path, lock = locked_store
    writer = sqlite3.connect(path, isolation_level=None)  # keeps the -wal and -shm files
    try:
        writer.execute("UPDATE runs SET status_reason = 'written, not checkpointed' WHERE run_id = 'n1'")
        lock()
        assert os.path.exists(f"{path}-wal")
        code, out, err = _cli(prefix, "runs", "--store", f"sqlite:///{path}")
        assert code == 0, err
        assert "written, not checkpointed" in out
    finally:
        writer.close()


def test_a_command_that_reads_leaves_no_file_beside_the_store(capsys, tmp_path):
    path = tmp_path / "store.db"
    _fill(path)
    for argv in READ_ONLY:
        code, _, err = _run(capsys, *argv, "--store", f"sqlite:///{path}")
        assert code == 0, (argv, err)
        assert sorted(os.listdir(tmp_path)) == ["store.db"], argv  # no -wal or -shm left behind


@pytest.mark.parametrize("where", ["folder", "sub/folder"])
def test_a_command_that_writes_a_new_store_in_a_folder_it_cannot_write_is_bad_input(tmp_path, where):
    prefix = _as_a_user_held_to_permissions()
    locked = tmp_path / "locked"
    locked.mkdir()
    locked.chmod(_READ_ONLY_FOLDER)
    try:
        probe = subprocess.run([*prefix, sys.executable, "-c", f"open({str(locked / 'probe')!r}, 'a')"],
                               capture_output=True)
        if probe.returncode == 0:
            pytest.skip("this process can write what is read-only: cannot test an unwritable folder")
        path = locked / where / "x.db"
        code, out, err = _cli(prefix, "db", "upgrade", "--store", f"sqlite:///{path}")
        assert code == 2, err
        assert "metric-gate: error: cannot create the" in err and str(path) in err, err
        assert sorted(os.listdir(locked)) == []
    finally:
        locked.chmod(stat.S_IRWXU)


def test_a_store_this_user_may_not_read_is_named_as_such(locked_store):
    prefix, path, _ = locked_store
    path.chmod(0)
    probe = subprocess.run([*prefix, sys.executable, "-c", f"open({str(path)!r})"], capture_output=True)
    if probe.returncode == 0:
        pytest.skip("this process can read what is unreadable: cannot test an unreadable store")
    for argv in READ_ONLY:
        code, out, err = _cli(prefix, *argv, "--store", f"sqlite:///{path}")
        assert code == 2, (argv, err)
        assert f"cannot read the metric store {path}: this user may not read the file" in err, err
        assert out == ""
