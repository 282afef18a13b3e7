"""``metric-gate demo``: the real nightly DAG, run through Airflow on the embedded defaults.

It prepares a temporary Airflow home (SQLite metadata), writes a few synthetic nights of training
output, runs the packaged example DAG (``example_dags/nightly_metric_gate.py``) once per night with
``airflow dags test`` against an embedded SQLite metric store, and prints the verdicts an on-call
engineer would read.  The last night is a regression (reward collapse, gradient-norm spike) and fails the gate.
"""

from __future__ import annotations

import json
import os
import random
import re
import shutil
import subprocess
import sys
import tempfile
import time
from datetime import date, timedelta
from pathlib import Path

from airflow_metric_gate.errors import BadInputError, LocatedError
from airflow_metric_gate.pipeline import evaluate
from airflow_metric_gate.report import render_report
from airflow_metric_gate.store import MetricStore
from airflow_metric_gate.store.sqlite import SQLiteStore

DAG_ID = "nightly_metric_gate"
SERIES = "demo-rl"
STEPS = 40
FIRST_NIGHT = date(2026, 11, 1)

GATES_YAML = """\
# Demo gates: the first three take steps and band from the built-in defaults table.
policy: calibrated
gates:
  - metric_key: rollout/raw_reward
  - metric_key: train/grad_norm
  - metric_key: train/ppo_kl
  - metric_key: rollout/tito_session_mismatch_rate/v1/assistant_text
"""


#: What the demo writes in its working folder: all of it, and only it, is removed by ``fresh``.
DEMO_FILES = ("metric_gate.db", "metric_gate.db-journal", "metric_gate.db-wal", "metric_gate.db-shm",
              "airflow", "records", "logs", "dags", "gates.yaml")


class WorkdirInUse(BadInputError):
    """The demo's working folder holds the store of an earlier demo."""


def stored_runs(work: Path) -> int:
    """Return how many runs the demo store in ``work`` holds (0 when there is none).

    :param work: the demo's working folder.
    """
    store_path = work / "metric_gate.db"
    if not store_path.is_file():
        return 0
    with SQLiteStore(store_path) as store:
        return store.count("runs")


def clear_workdir(work: Path) -> None:
    """Remove what an earlier demo wrote in ``work`` (:data:`DEMO_FILES`), nothing else.

    :param work: the demo's working folder.
    """
    for name in DEMO_FILES:
        path = work / name
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path)
        elif path.exists() or path.is_symlink():
            path.unlink()


def find_dags_folder() -> Path:
    """Return the folder of the example DAG shipped inside the installed package.

    It holds ``nightly_metric_gate.py`` and ``gates/nightly_metric_gate.yaml`` (the repository's
    ``dags/nightly_metric_gate.py`` runs that DAG file), so the demo needs no source checkout.
    """
    folder = Path(__file__).resolve().parent / "example_dags"
    if not (folder / f"{DAG_ID}.py").is_file():
        raise FileNotFoundError(f"the installed package has no example_dags/{DAG_ID}.py; reinstall airflow-metric-gate")
    return folder


def copy_example_dags(target: Path) -> Path:
    """Copy the packaged example DAG and its gates file into ``target`` (the demo's DAGs folder).

    Airflow then parses a folder of the demo's own, never the installed package.

    :param target: the DAGs folder to fill.
    """
    source = find_dags_folder()
    (target / "gates").mkdir(parents=True, exist_ok=True)
    for name in (f"{DAG_ID}.py", f"gates/{DAG_ID}.yaml"):
        shutil.copyfile(source / name, target / name)
    return target


def write_night(root: Path, night: date, index: int, *, regressed: bool) -> Path:
    """Write one night's record as two per-process files plus the ``_SUCCESS`` marker.

    :param root: the record root.
    :param night: the night's date (the folder name).
    :param index: the night's number, seeds the noise.
    :param regressed: make the reward collapse and the gradient norm spike.
    """
    rng = random.Random(index)
    folder = root / night.isoformat()
    folder.mkdir(parents=True, exist_ok=True)
    reward = [0.2 + 0.015 * s * (1 + rng.uniform(-0.02, 0.02)) for s in range(STEPS)]
    grad = [1.0 + 0.5 / (1 + s) + rng.uniform(-0.03, 0.03) for s in range(STEPS)]
    kl = [0.01 + 0.0002 * s + rng.uniform(-0.001, 0.001) for s in range(STEPS)]
    if regressed:
        reward = [r * (1.0 if s < 10 else 0.55) for s, r in enumerate(reward)]
        grad = [g * (1.0 if s < 25 else 3.0) for s, g in enumerate(grad)]
    half = STEPS // 2
    for rank, part in enumerate((range(half), range(half, STEPS))):
        lines = [
            {"metric": "rollout/raw_reward", "series": [[s, reward[s]] for s in part]},
            {"metric": "train/grad_norm", "series": [[s, grad[s]] for s in part]},
            {"metric": "train/ppo_kl", "series": [[s, kl[s]] for s in part]},
        ]
        if rank == 1:
            rate = 0.02 + rng.uniform(0, 0.01)
            lines.append({"metric": "rollout/tito_session_mismatch_rate/v1/assistant_text",
                          "series": [[STEPS - 1, rate]]})
        (folder / f"rank-{rank}.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
    (folder / "_SUCCESS").write_text("")
    return folder


def night_conf(records: Path, gates: Path, night: date) -> dict:
    """Return the nightly DAG's run conf for one demo night (a baseline run of the demo series).

    :param records: the record root.
    :param gates: the gates file.
    :param night: the night.
    """
    return {"record_root": str(records), "gates_file": str(gates), "series": SERIES, "role": "baseline",
            "night": night.isoformat()}


def _say(message: str) -> None:
    print(f"[demo] {message}", flush=True)


def airflow_env(home: Path, dags: Path, store_path: Path) -> dict:
    """Return the environment of an Airflow home on SQLite whose metric store is an embedded SQLite file.

    :param home: the ``AIRFLOW_HOME``.
    :param dags: the DAGs folder.
    :param store_path: the metric store's SQLite file (connection ``metric_gate_db``).
    """
    return {
        **os.environ,
        "AIRFLOW_HOME": str(home),
        "AIRFLOW__CORE__DAGS_FOLDER": str(dags),
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
        "AIRFLOW__LOGGING__LOGGING_LEVEL": "INFO",
        "AIRFLOW_CONN_METRIC_GATE_DB": json.dumps({"conn_type": "sqlite", "host": str(store_path)}),
    }


def airflow(args: list[str], env: dict, log: Path) -> int:
    """Run an ``airflow`` command with its output in ``log``; return its exit status.

    :param args: the command's arguments.
    :param env: its environment.
    :param log: where its output goes.
    """
    airflow = shutil.which("airflow", path=os.path.dirname(sys.executable) + os.pathsep + env.get("PATH", ""))
    command = [airflow] if airflow else [sys.executable, "-m", "airflow"]
    with open(log, "w") as out:
        return subprocess.run(command + args, env=env, stdout=out, stderr=subprocess.STDOUT, check=False).returncode


_SUMMARY = re.compile(r"metric-gate: (.+? run \S+: (?:NOT-)?TRUSTED \(\d+ results, \d+ fail, \d+ error\))")


def _summary_lines(log: Path) -> list[str]:
    return _SUMMARY.findall(log.read_text(errors="replace"))


def _cli() -> str:
    beside = Path(sys.executable).parent / "metric-gate"
    return str(beside) if beside.exists() else "metric-gate"


def print_verdicts(store: MetricStore, runs: list, *, regressed: bool) -> None:
    """Print the first and the last night's verdicts, each under a line that says which night it is.

    :param store: the demo's metric store.
    :param runs: the stored nights of the demo's series, oldest first.
    :param regressed: whether the last night is the regressed one.
    """
    total = len(runs)
    shown = [(1, runs[0]), (total, runs[-1])] if total > 1 else [(1, runs[0])] if runs else []
    for number, run in shown:
        if number == total and regressed:
            label = "the regressed night"
        elif number == 1:
            label = "the first clean night: no history to compare with yet"
        else:
            label = "a clean night"
        print()
        _say(f"verdict of night {number}/{total} {run.logical_date.date()} ({label}), as metric-gate show "
             f"{run.run_id} prints it:")
        print(render_report(evaluate(store, run.run_id, record=False)))


def run_demo(workdir: str | None = None, nights: int = 5, *, fresh: bool = False) -> int:
    """Run the demo and return 0 when every clean night passed and the regressed night failed.

    :param workdir: where to keep the demo's files (default: a new temporary folder).
    :param nights: clean nights before the regressed one.
    :param fresh: first remove what an earlier demo wrote in ``workdir`` (:data:`DEMO_FILES`).
    :raises WorkdirInUse: ``workdir`` holds an earlier demo's store with runs, and ``fresh`` is false
        (its nights would be judged against the earlier ones).
    """
    started = time.monotonic()
    work = Path(workdir or tempfile.mkdtemp(prefix="metric-gate-demo-")).resolve()
    if not fresh and workdir and (earlier := stored_runs(work)):
        raise WorkdirInUse(
            f"--workdir {work} already holds a demo metric store with {earlier} run(s), which a new demo "
            "would add to (its nights judged against the earlier ones); add --fresh to start over there "
            "(it deletes the demo's store, Airflow home, records and logs in that folder), or give another --workdir"
        )
    home, records, logs = work / "airflow", work / "records", work / "logs"
    gates = work / "gates.yaml"
    try:
        if fresh:
            clear_workdir(work)
        for folder in (work, home, records, logs):
            folder.mkdir(parents=True, exist_ok=True)
        dags = copy_example_dags(work / "dags")
        gates.write_text(GATES_YAML)
    except OSError as err:  # a working folder that cannot be written is bad input, not a bug
        raise LocatedError(f"cannot use it as the demo's working folder: {err.strerror or err}",
                           path=str(err.filename or work)) from None
    store_path = work / "metric_gate.db"
    env = airflow_env(home, dags, store_path)
    _say(f"working folder {work}")
    where = f"the Airflow home {home}" if workdir else "a temporary Airflow home"
    _say(f"preparing {where} with SQLite metadata (airflow db migrate) ...")
    if airflow(["db", "migrate"], env, logs / "db-migrate.log") != 0:
        _say(f"airflow db migrate failed; see {logs / 'db-migrate.log'}")
        return 1

    outcomes = []
    total = nights + 1
    for index in range(total):
        night = FIRST_NIGHT + timedelta(days=index)
        regressed = index == total - 1
        write_night(records, night, index, regressed=regressed)
        conf = night_conf(records, gates, night)
        label = "regressed night" if regressed else "clean night"
        _say(f"night {index + 1}/{total} {night} ({label}): sensor -> ingest -> select -> persist -> evaluate ...")
        log = logs / f"{night}.log"
        code = airflow(["dags", "test", DAG_ID, night.isoformat(), "-c", json.dumps(conf)], env, log)
        summary = _summary_lines(log)
        _say(f"    {'DAG run succeeded' if code == 0 else 'DAG run FAILED'}; "
             f"{summary[-1] if summary else 'no verdict line (see ' + str(log) + ')'}")
        outcomes.append((night, regressed, code))

    with SQLiteStore(store_path) as store:
        runs = sorted(store.list_runs(series=SERIES, limit=total), key=lambda r: r.logical_date)
        print_verdicts(store, runs, regressed=outcomes[-1][1])
        rows = store.count("metric_values")
    ok = all((code != 0) == regressed for _, regressed, code in outcomes) and len(runs) == total
    print()
    _say(f"finished in {time.monotonic() - started:.0f}s: {len(runs)} nights stored, {rows} metric_values rows")
    _say(f"metric store (SQLite): {store_path}")
    _say(f"  {_cli()} history rollout/raw_reward --series {SERIES} --store sqlite:///{store_path}")
    _say(f"  {_cli()} runs --series {SERIES} --store sqlite:///{store_path}")
    if runs:
        _say(f"  {_cli()} show {runs[-1].run_id} --all --store sqlite:///{store_path}")
        _say(f"  {_cli()} replay --series {SERIES} --backend {runs[-1].backend} --suite {runs[-1].suite} "
             f"--store sqlite:///{store_path}")
    # `airflow dags test` runs the tasks in its own process: their logs are in its output, one file per night.
    last_log = logs / f"{outcomes[-1][0]}.log"
    _say(f"task logs of the regressed night (every task, in order): {last_log}")
    _say(f"  other nights: {logs}{os.sep}<YYYY-MM-DD>.log")
    if ok:
        _say("the clean nights passed and the regressed night failed its metric_gate.evaluate_gate task, as expected")
        return 0
    _say("unexpected outcome: " + ", ".join(f"{n} exit {c}" for n, _, c in outcomes))
    return 1
