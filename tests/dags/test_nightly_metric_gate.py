"""dags/nightly_metric_gate.py end to end, under ``dag.test()`` and ``airflow dags test``.

The metric store sits behind the Airflow connection ``metric_gate_db``, given as
``AIRFLOW_CONN_METRIC_GATE_DB``: the embedded SQLite store, and the real Postgres store (tests
marked ``postgres``, on the test session's own database).  The Airflow metadata database is the
throwaway SQLite one of ``airflow_env``.
"""

from __future__ import annotations

import json
import re
import sqlite3
import uuid
from dataclasses import dataclass
from datetime import timezone
from pathlib import Path
from typing import Any

import pytest
from _gate_data import NIGHTLY_VALUES, store_query, write_night

pytestmark = pytest.mark.airflow_db

DAG_ID = "nightly_metric_gate"
DAGS_FOLDER = Path(__file__).resolve().parents[2] / "dags"
PACKAGED_DAG = Path(__file__).resolve().parents[2] / "airflow_metric_gate" / "example_dags" / "nightly_metric_gate.py"
RUN_PREFIX = "@@metric-gate-dag-run@@ "  # starts each run's output in AirflowEnv.dag_tests
SERIES = "rl-dagtest"
ROWS_PER_NIGHT = 13  # 4 grad_norm + 4 ppo_kl + 4 raw_reward + 1 TITO "last"


def _write_night(root, day: str, *, reward: float = 0.8) -> None:
    """One record directory per night: two training processes (steps 0-3 split between them)."""
    write_night(root / day, {**NIGHTLY_VALUES, "rollout/raw_reward": reward})


@dataclass
class GateStore:
    """The metric store a test's DAG runs write to, and plain SQL to look into it.

    :param backend: ``sqlite`` or ``postgres``.
    :param url: the store URL, also the Airflow connection URI.
    """

    backend: str
    url: str

    @property
    def env(self) -> dict[str, str]:
        """The environment that points the DAG's ``metric_gate_db`` connection at this store."""
        return {"AIRFLOW_CONN_METRIC_GATE_DB": self.url}

    def query(self, sql: str, *params: Any) -> list[tuple]:
        """Run one query (``%s`` placeholders); no tables yet (nothing ever stored) gives no rows.

        :param sql: the statement.
        :param params: its parameters.
        """
        if self.backend == "sqlite":
            path = Path(self.url.removeprefix("sqlite:///"))
            if not path.exists():
                return []
            with sqlite3.connect(path) as conn:
                if not conn.execute("SELECT 1 FROM sqlite_master WHERE name = 'runs'").fetchall():
                    return []
                return conn.execute(sql.replace("%s", "?"), params).fetchall()
        if not store_query(self.url, "SELECT to_regclass('runs') IS NOT NULL")[0][0]:
            return []
        return store_query(self.url, sql, *params)

    def run(self, run_id: str) -> dict[str, Any]:
        """Return a stored run's status, try number, last update and value count.

        :param run_id: the store run id.
        """
        rows = self.query(
            "SELECT status, role, try_number, updated_at, "
            "(SELECT COUNT(*) FROM metric_values v WHERE v.run_id = runs.run_id) FROM runs WHERE run_id = %s",
            run_id,
        )
        assert len(rows) == 1, f"store run {run_id} not found"
        return dict(zip(("status", "role", "try_number", "updated_at", "rows"), rows[0]))

    def counts(self) -> dict[str, int]:
        """Return the row count of ``runs`` and ``metric_values``."""
        runs = self.query("SELECT COUNT(*) FROM runs")
        values = self.query("SELECT COUNT(*) FROM metric_values")
        return {"runs": runs[0][0] if runs else 0, "metric_values": values[0][0] if values else 0}


@pytest.fixture
def gate_store(store_url) -> GateStore:
    """An empty metric store, once per backend (SQLite file, Postgres database)."""
    return GateStore("sqlite" if store_url.startswith("sqlite") else "postgres", store_url)


@pytest.fixture
def pg_store(pg_url) -> GateStore:
    """An empty Postgres metric store."""
    return GateStore("postgres", pg_url)


@pytest.fixture
def nights(tmp_path):
    root = tmp_path / "records"
    for day in ("2026-11-01", "2026-11-02", "2026-11-03"):
        _write_night(root, day)
    _write_night(root, "2026-11-04", reward=0.4)  # raw_reward halves: below the band's lower edge
    return root


def _conf(root, **extra):
    return {"record_root": str(root), "series": SERIES, **extra}


def _run_nights(airflow_env, root, store: GateStore, days, **conf):
    """Run the nightly DAG once per night, in order, in one process."""
    runs = [{"dag_id": DAG_ID, "conf": _conf(root, **conf), "logical_date": f"{day}T00:00:00+00:00"} for day in days]
    return airflow_env.dag_tests(runs, env=store.env)


def _run(airflow_env, root, store: GateStore, day, **conf):
    return _run_nights(airflow_env, root, store, [day], **conf)[0]


def test_baseline_nights_pass_then_a_regression_fails_loudly(airflow_env, nights, gate_store):
    days = ("2026-11-01", "2026-11-02", "2026-11-03", "2026-11-04")
    *clean, result = _run_nights(airflow_env, nights, gate_store, days, role="baseline")

    for night in clean:
        assert night.state == "success", night.output[-6000:]
        verdict = night.xcom["metric_gate.evaluate_gate"]
        assert verdict["trusted"] is True and verdict["role"] == "baseline"
        json.dumps(night.xcom)
        stored = gate_store.run(night.xcom["metric_gate.persist_values"]["run_id"])
        assert (stored["status"], stored["role"], stored["rows"]) == ("trusted", "baseline", ROWS_PER_NIGHT)
    assert clean[-1].xcom["metric_gate.persist_values"]["rows"] == ROWS_PER_NIGHT
    # judged against the first nights: the packaged gates file is calibrated, so each declaration saw 2 trusted
    # nights (still calibrating: 5 are needed for its night test; the constraint's band is the prior meanwhile)
    assert {d["nights"] for d in clean[-1].xcom["metric_gate.evaluate_gate"]["declarations"]} == {2}

    assert result.state == "failed"
    assert result.task_state("metric_gate.evaluate_gate") == "failed"
    assert result.tasks["metric_gate.evaluate_gate"]["try_number"] == 1  # a regression is not retried
    assert result.task_state("metric_gate.persist_values") == "success"
    verdict = result.xcom["metric_gate.evaluate_gate"]  # pushed before the task failed
    assert verdict["schema"] == "airflow-metric-gate/verdict/v1"
    assert verdict["trusted"] is False and verdict["counts"]["FAIL"] == 5  # 4 steps and the night's own result
    assert {(r["metric_key"], r["status"]) for r in verdict["results"]} == {("rollout/raw_reward", "FAIL")}
    assert sorted(r["step"] for r in verdict["results"] if r["step"] is not None) == [0, 1, 2, 3]
    assert len(json.dumps(verdict)) < 64 * 1024
    summary = f"metric-gate: {SERIES} run {verdict['run_id']}: NOT-TRUSTED (14 results, 5 fail, 0 error)"
    assert summary in result.output
    assert "AirflowFailException" in result.output
    assert re.search(r"FAIL rollout/raw_reward step \d: .*below", result.output)
    assert "Full verdict: XCom return_value of task metric_gate.evaluate_gate" in result.output
    assert summary not in clean[-1].output  # each run's output is its own

    # The regressed night is stored, untrusted, so it never joins a later baseline.
    stored = gate_store.run(verdict["run_id"])
    assert (stored["status"], stored["role"], stored["rows"]) == ("untrusted", "baseline", ROWS_PER_NIGHT)
    assert gate_store.counts() == {"runs": 4, "metric_values": 4 * ROWS_PER_NIGHT}


def test_manual_run_is_shadow_and_reports_without_failing(airflow_env, nights, tmp_path):
    store = GateStore("sqlite", f"sqlite:///{tmp_path / 'metric_gate.db'}")
    # role "auto" on the last night: dag.test makes a manual run
    runs = [
        {"dag_id": DAG_ID, "conf": _conf(nights, role="baseline"), "logical_date": "2026-11-01T00:00:00+00:00"},
        {"dag_id": DAG_ID, "conf": _conf(nights, role="baseline"), "logical_date": "2026-11-02T00:00:00+00:00"},
        {"dag_id": DAG_ID, "conf": _conf(nights), "logical_date": "2026-11-04T00:00:00+00:00"},
    ]
    *baseline, result = airflow_env.dag_tests(runs, env=store.env)

    assert [r.state for r in baseline] == ["success", "success"]
    assert result.run_type == "manual"
    assert result.state == "success", result.output[-6000:]
    verdict = result.xcom["metric_gate.evaluate_gate"]
    assert verdict["role"] == "shadow"
    assert verdict["trusted"] is False
    assert "NOT-TRUSTED" in result.output
    assert "Shadow run" in result.output
    assert store.run(verdict["run_id"])["role"] == "shadow"
    # said before the table, in one line: neither fails nor builds history, and how to make it a baseline
    note = result.output.index("Shadow run: reported only, it neither fails this task nor builds history")
    assert note < result.output.index("metric-gate verdict for series")
    assert "fails the gate" not in result.output


def test_missing_metric_is_an_error_result_not_a_crash(airflow_env, nights, tmp_path):
    store = GateStore("sqlite", f"sqlite:///{tmp_path / 'metric_gate.db'}")
    night = nights / "2026-11-05"
    night.mkdir()
    (night / "rank0.jsonl").write_text(json.dumps({"metric": "train/grad_norm", "series": [[0, 1.0]]}) + "\n")
    (night / "_SUCCESS").touch()

    result = _run(airflow_env, nights, store, "2026-11-05", role="baseline")

    assert result.task_state("metric_gate.select_steps") == "success"
    assert result.task_state("metric_gate.evaluate_gate") == "failed"
    verdict = result.xcom["metric_gate.evaluate_gate"]
    assert verdict["counts"]["ERROR"] == 3
    assert any("rollout/raw_reward" in r["metric_key"] and r["status"] == "ERROR" for r in verdict["results"])


def test_malformed_record_fails_ingest_without_retry_and_stores_nothing(airflow_env, nights, gate_store):
    night = nights / "2026-11-06"
    night.mkdir()
    (night / "rank0.jsonl").write_text('{"metric": "train/grad_norm", "series": [[0, 1.0]]}\nnot json\n')
    (night / "_SUCCESS").touch()

    result = _run(airflow_env, nights, gate_store, "2026-11-06", role="baseline")

    assert result.state == "failed"
    assert result.task_state("metric_gate.ingest_record") == "failed"
    assert result.tasks["metric_gate.ingest_record"]["try_number"] == 1  # bad input is not retried
    assert result.task_state("metric_gate.persist_values") == "upstream_failed"
    assert result.task_state("metric_gate.evaluate_gate") == "upstream_failed"
    assert "rank0.jsonl:2" in result.output
    assert gate_store.counts() == {"runs": 0, "metric_values": 0}


@pytest.mark.postgres
def test_airflow_dags_test_five_nights_then_clear_and_rerun_persist(airflow_env, pg_store, tmp_path):
    """Five nights on Postgres, the last two through ``airflow dags test`` (a clean and a regressed
    night: its exit statuses); then persist_values cleared and re-run.  The first three nights, the
    history, run in the session's DAG runner process (each ``airflow`` command starts Airflow again)."""
    root = tmp_path / "cli-records"
    days = ("2026-11-01", "2026-11-02", "2026-11-03", "2026-11-04", "2026-11-05")
    for day in days[:4]:
        _write_night(root, day)
    _write_night(root, days[4], reward=0.4)
    conf = json.dumps(_conf(root, role="baseline"))

    history = _run_nights(airflow_env, root, pg_store, days[:3], role="baseline")
    assert [night.state for night in history] == ["success"] * 3, history[-1].output[-6000:]
    exits = []
    for day in days[3:]:
        proc = airflow_env.airflow("dags", "test", DAG_ID, day, "--conf", conf, env=pg_store.env)
        exits.append(proc.returncode)
        assert f"metric-gate: {SERIES} run " in proc.stdout, proc.stdout[-6000:]
    assert exits[0] == 0, proc.stdout[-6000:]
    assert exits[1] != 0
    assert "AirflowFailException" in proc.stdout

    result = airflow_env.inspect(DAG_ID)
    assert result.state == "failed"
    failed = {task: info["state"] for task, info in result.tasks.items() if info["state"] != "success"}
    assert failed == {"metric_gate.evaluate_gate": "failed"}
    assert result.xcom["metric_gate.wait_for_record"] == str(root / days[4])
    verdict = result.xcom["metric_gate.evaluate_gate"]
    assert verdict["trusted"] is False
    assert {r["metric_key"] for r in verdict["results"]} == {"rollout/raw_reward"}

    per_night = pg_store.query(
        "SELECT r.logical_date, r.status, COUNT(v.run_id) FROM runs r JOIN metric_values v ON v.run_id = r.run_id "
        "GROUP BY r.run_id, r.logical_date, r.status ORDER BY r.logical_date"
    )
    assert [(str(d.astimezone(timezone.utc).date()), status, n) for d, status, n in per_night] == [
        *((day, "trusted", ROWS_PER_NIGHT) for day in days[:4]),
        (days[4], "untrusted", ROWS_PER_NIGHT),
    ]
    assert pg_store.query("SELECT COUNT(DISTINCT run_id) FROM metric_values") == [(5,)]
    before = pg_store.counts()
    store_run = verdict["run_id"]
    stored = pg_store.run(store_run)

    # Clear persist_values of the fifth night's run (-t is a substring match in Airflow 3.3;
    # -s/-e select runs by logical date), then run that task instance again in the same DAG run.
    clear = airflow_env.airflow(
        "tasks", "clear", DAG_ID, "-t", "metric_gate.persist_values", "-s", days[4], "-e", days[4], "-y",
        env=pg_store.env,
    )
    assert clear.returncode == 0, clear.stdout[-4000:]
    cleared = airflow_env.inspect(DAG_ID, result.run_id)
    assert cleared.task_state("metric_gate.persist_values") == "None"  # cleared: no state, to run again
    assert cleared.task_state("metric_gate.evaluate_gate") == "failed"  # not downstream-cleared

    rerun = airflow_env.airflow("tasks", "test", DAG_ID, "metric_gate.persist_values", result.run_id,
                                env=pg_store.env)
    assert rerun.returncode == 0, rerun.stdout[-6000:]
    assert f"Stored {ROWS_PER_NIGHT} value(s) and 0 selection error(s) for 4 declaration(s) under run {store_run}" in (
        rerun.stdout
    )
    after = airflow_env.inspect(DAG_ID, result.run_id)
    assert after.task_state("metric_gate.persist_values") == "success"
    assert after.xcom["metric_gate.persist_values"]["run_id"] == store_run

    # Same store run rewritten in place: no row more, no row less.
    assert pg_store.counts() == before
    assert pg_store.query("SELECT COUNT(DISTINCT run_id) FROM metric_values") == [(5,)]
    restored = pg_store.run(store_run)
    assert restored["rows"] == ROWS_PER_NIGHT
    assert restored["updated_at"] > stored["updated_at"]  # the task really wrote again
    assert restored["status"] == "pending"  # evaluate_gate has not judged the rewritten run yet
    assert restored["try_number"] == after.tasks["metric_gate.persist_values"]["try_number"]


def _fast_nightly_copy(airflow_env, *, timeout: float) -> tuple[str, Path]:
    """The nightly DAG with a short sensor poke interval and timeout, in the scratch bundle."""
    source = PACKAGED_DAG.read_text()
    dag_id = f"nightly_fast_{uuid.uuid4().hex[:8]}"
    for old, new in (
        ('dag_id="nightly_metric_gate"', f"dag_id={dag_id!r}"),
        ("    metric_gate(\n", f"    metric_gate(\n        poke_interval=0.2,\n        timeout={timeout!r},\n"),
    ):
        assert source.count(old) == 1, f"{old!r} not found once in the nightly DAG"
        source = source.replace(old, new)
    dag_file = airflow_env.scratch_dags / f"{dag_id}.py"
    dag_file.write_text(source)
    return dag_id, dag_file


@pytest.mark.postgres
def test_nightly_sensor_times_out_naming_the_path_then_defers_and_completes(airflow_env, pg_store, tmp_path):
    dag_id, dag_file = _fast_nightly_copy(airflow_env, timeout=2.0)
    root = tmp_path / "records"
    conf = _conf(root, role="baseline", gates_file=str(DAGS_FOLDER / "gates" / "nightly_metric_gate.yaml"))
    _write_night(root, "2026-11-21")
    marker = root / "2026-11-21" / "_SUCCESS"
    marker.unlink()  # the training job is still writing
    # 2026-11-20 has no record at all, and nothing will write one.
    current = {"run": None}

    def land_marker_once_second_run_defers(line: str) -> None:
        if line.startswith(RUN_PREFIX):
            current["run"] = line[len(RUN_PREFIX) :].strip()
        elif current["run"] == "1" and "running trigger in line" in line:
            marker.touch()

    missing, late = airflow_env.dag_tests(
        [
            {"dag_id": dag_id, "dag_file": dag_file, "conf": conf, "logical_date": f"{day}T00:00:00+00:00"}
            for day in ("2026-11-20", "2026-11-21")
        ],
        env=pg_store.env,
        on_line=land_marker_once_second_run_defers,
    )

    assert missing.state == "failed"
    assert missing.task_state("metric_gate.wait_for_record") == "failed"
    assert missing.tasks["metric_gate.wait_for_record"]["try_number"] == 1  # a timeout is not retried
    assert missing.task_state("metric_gate.ingest_record") == "upstream_failed"
    assert "AirflowSensorTimeout" in missing.output
    assert f"Timed out after 2s waiting for the training record: the record {root / '2026-11-20'} does not exist" in (
        missing.output
    )

    assert "running trigger in line" in late.output, "the sensor never deferred"
    assert late.state == "success", late.output[-6000:]
    assert late.xcom["metric_gate.wait_for_record"] == str(root / "2026-11-21")
    assert late.xcom["metric_gate.evaluate_gate"]["trusted"] is True
    stored = pg_store.run(late.xcom["metric_gate.persist_values"]["run_id"])
    assert (stored["status"], stored["rows"]) == ("trusted", ROWS_PER_NIGHT)
    assert pg_store.counts() == {"runs": 1, "metric_values": ROWS_PER_NIGHT}  # the timed-out night stored nothing
