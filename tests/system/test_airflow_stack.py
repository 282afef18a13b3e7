"""The package on a real Airflow 3 deployment: CeleryExecutor, a Celery worker, the triggerer.

All tests share one started stack (``airflow_stack``, see ``conftest.py``).  The workloads:

* a backfill of ``dags/nightly_metric_gate.py`` over seven nights at full backfill parallelism
  (``max_active_runs`` 8, and enough worker slots for every night at once), with a regressed night
  in the middle.  The nights then move through the DAG in lockstep and reach ``metric_gate.evaluate_gate``
  together: the worst case for a gate that must judge each night against the nights before it;
* a backfill of ``two_series_gate`` (two gate chains, series ``rl-7b`` and ``rl-70b``, in one DAG
  run) over three nights;
* a run of ``deferred_record_sensor`` whose record appears only after the sensor deferred;
* last, the asset examples (``examples/assets_*.py``): a training job's Asset event schedules the
  gate, a trusted night's "gated metrics" event schedules the consumer, and a regressed night's
  ``approve_night`` is answered through the REST API.

The ``workloads`` fixture submits all three at once (the worker has a slot for every task they can
run side by side), so they overlap as on a busy deployment.  Each test waits (bounded) for its own
workload, the sensor's first (the test writes its record while the backfills run), and checks what
a user would look at: task states and XComs through the REST API, and the metric store's tables.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import date, timedelta
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest
from _airflow_stack import AirflowStack
from _gate_data import NIGHTLY_VALUES, write_night

# postgres too: under METRIC_GATE_REQUIRE_PG=1 a skipped system test fails the run.
pytestmark = [pytest.mark.system, pytest.mark.postgres]

NIGHTLY_DAG = "nightly_metric_gate"
TWO_SERIES_DAG = "two_series_gate"
SENSOR_DAG = "deferred_record_sensor"

VERDICT_SCHEMA = "airflow-metric-gate/verdict/v1"
STATUSES = {"PASS", "FAIL", "INACTIVE", "ERROR"}

FIRST_NIGHT = date(2026, 6, 1)
NIGHTS = [FIRST_NIGHT + timedelta(days=i) for i in range(7)]
REGRESSED = NIGHTS[3]  # the middle night: three clean nights before it, three after
BACKFILL_SERIES = "rl-system-backfill"
REGRESSED_REWARD = 0.3  # enforced band of rollout/raw_reward around 0.8: [0.64, 1.2]
RESULTS_PER_NIGHT = 13  # 4 steps each of grad_norm, ppo_kl, raw_reward, and the TITO rate's "last"

TWO_SERIES_NIGHTS = NIGHTS[:3]
TWO_SERIES = {  # series -> (raw_reward, grad_norm): far enough apart that mixed histories FAIL
    "rl-7b": (0.8, 1.0),
    "rl-70b": (0.3, 4.0),
}

# Nights judged in order may wait for each other (EvaluateGateOperator checks again every minute).
BACKFILL_TIMEOUT = 540.0
SENSOR_TIMEOUT = 120.0


def _iso(night: date) -> str:
    return f"{night.isoformat()}T00:00:00Z"


@dataclass
class Workloads:
    """What the module submitted to the stack.

    :param nightly_backfill: the backfill id of the nightly DAG.
    :param two_series_backfill: the backfill id of the two-series DAG.
    :param sensor_run_id: the Airflow run id of the deferred sensor's DAG run.
    :param sensor_record: where that run's record appears once the test writes it.
    """

    nightly_backfill: int
    two_series_backfill: int
    sensor_run_id: str
    sensor_record: Path


def _create_backfill(stack: AirflowStack, dag_id: str, nights: list[date], conf: dict[str, Any]) -> int:
    backfill = stack.api.post(
        "/api/v2/backfills",
        {
            "dag_id": dag_id,
            "from_date": _iso(nights[0]),
            "to_date": _iso(nights[-1]),
            "max_active_runs": 8,
            "dag_run_conf": conf,
            "reprocess_behavior": "none",
        },
    )
    return backfill["id"]


@pytest.fixture(scope="session")  # module scope restarted it when xdist ran another module in between
def workloads(airflow_stack: AirflowStack) -> Workloads:
    """Write the records and submit every workload of the module at once."""
    records = airflow_stack.tmp / "records"
    for night in NIGHTS:
        values = dict(NIGHTLY_VALUES)
        if night == REGRESSED:
            values["rollout/raw_reward"] = REGRESSED_REWARD
        write_night(records / "nightly" / night.isoformat(), values)
    for series, (reward, grad_norm) in TWO_SERIES.items():
        for night in TWO_SERIES_NIGHTS:
            values = {"train/grad_norm": grad_norm, "rollout/raw_reward": reward}
            write_night(records / "two_series" / series / night.isoformat(), values)

    nightly = _create_backfill(
        airflow_stack,
        NIGHTLY_DAG,
        NIGHTS,
        {"record_root": str(records / "nightly"), "series": BACKFILL_SERIES},
    )
    two_series = _create_backfill(
        airflow_stack, TWO_SERIES_DAG, TWO_SERIES_NIGHTS, {"record_root": str(records / "two_series")}
    )
    sensor_record = records / "deferred" / FIRST_NIGHT.isoformat()
    run = airflow_stack.api.post(
        f"/api/v2/dags/{SENSOR_DAG}/dagRuns",
        {"logical_date": None, "conf": {"record_path": str(sensor_record)}},
    )
    return Workloads(nightly, two_series, run["dag_run_id"], sensor_record)


def _finished_backfill_runs(stack: AirflowStack, dag_id: str, nights: list[date]) -> dict[date, dict[str, Any]]:
    """Wait until every night of the DAG's backfill has a finished DAG run; return them by night."""

    def finished() -> dict[date, dict[str, Any]] | None:
        runs = [r for r in stack.api.dag_runs(dag_id) if r["run_type"] == "backfill"]
        if len(runs) < len(nights) or any(r["state"] not in ("success", "failed") for r in runs):
            return None
        return {date.fromisoformat(r["logical_date"][:10]): r for r in runs}

    runs = stack.wait_for(f"the backfill of {dag_id} to finish", finished, BACKFILL_TIMEOUT, interval=3)
    assert sorted(runs) == nights, f"backfill of {dag_id} created runs for {sorted(runs)}, expected {nights}"
    return runs


@pytest.fixture(scope="session")  # module scope restarted it when xdist ran another module in between
def nightly_runs(airflow_stack: AirflowStack, workloads: Workloads) -> dict[date, dict[str, Any]]:
    """The finished DAG runs of the nightly backfill, by night."""
    return _finished_backfill_runs(airflow_stack, NIGHTLY_DAG, NIGHTS)


def _store_runs(stack: AirflowStack, where: str, *params: Any) -> list[dict[str, Any]]:
    columns = ("run_id", "series", "role", "status", "night", "airflow_run_id", "task_id")
    rows = stack.store_query(
        "SELECT run_id, series, role, status, logical_date::date, airflow_run_id, provenance::json->>'task_id' "
        f"FROM runs WHERE {where} ORDER BY logical_date, series",
        *params,
    )
    return [dict(zip(columns, row)) for row in rows]


def test_deferred_sensor_completes_in_the_triggerer(airflow_stack: AirflowStack, workloads: Workloads) -> None:
    """The record appears only after the sensor deferred; the triggerer notices and the run succeeds."""
    api = airflow_stack.api
    run_id = workloads.sensor_run_id

    def deferred() -> dict[str, Any] | None:
        ti = api.task_instances(SENSOR_DAG, run_id)["wait_for_record"]
        assert ti["state"] not in ("success", "failed", "up_for_retry"), f"sensor ended as {ti['state']!r} unseen"
        trigger = ti.get("trigger") or {}
        # Deferred, and the trigger taken up by the triggerer (its job id is on the trigger row).
        return ti if ti["state"] == "deferred" and trigger.get("triggerer_id") is not None else None

    ti = airflow_stack.wait_for("the sensor to defer to the triggerer", deferred, SENSOR_TIMEOUT, interval=1)
    assert ti["trigger"]["classpath"].endswith("TrainingOutputTrigger"), ti["trigger"]
    assert not workloads.sensor_record.exists()
    write_night(workloads.sensor_record, NIGHTLY_VALUES)  # the marker last, as the training job writes it

    def finished() -> dict[str, Any] | None:
        run = api.get(f"/api/v2/dags/{SENSOR_DAG}/dagRuns/{run_id}")
        return run if run["state"] in ("success", "failed") else None

    run = airflow_stack.wait_for("the sensor's DAG run to finish", finished, SENSOR_TIMEOUT, interval=1)
    ti = api.task_instances(SENSOR_DAG, run_id)["wait_for_record"]
    assert (run["state"], ti["state"]) == ("success", "success"), ti
    assert ti["try_number"] == 1, "resuming after the deferral is not a retry"
    location = api.xcom_return_value(SENSOR_DAG, run_id, "wait_for_record")
    assert str(location).rstrip("/").endswith(str(workloads.sensor_record)), location


def test_backfill_catches_the_regressed_night_and_trusts_every_clean_one(
    airflow_stack: AirflowStack, nightly_runs: dict[date, dict[str, Any]]
) -> None:
    """Seven nights backfilled at once (max_active_runs 8) are still judged in night order."""
    api = airflow_stack.api
    store = {run["night"]: run for run in _store_runs(airflow_stack, "series = %s", BACKFILL_SERIES)}
    assert sorted(store) == NIGHTS, f"store runs of {BACKFILL_SERIES}: {sorted(store)}"

    observed = []
    verdicts = {}
    for night in NIGHTS:
        dag_run = nightly_runs[night]
        evaluate = api.task_instances(NIGHTLY_DAG, dag_run["dag_run_id"])["metric_gate.evaluate_gate"]
        verdict = api.xcom_return_value(NIGHTLY_DAG, dag_run["dag_run_id"], "metric_gate.evaluate_gate")
        verdicts[night] = verdict
        observed.append(
            (night.isoformat(), dag_run["state"], evaluate["state"], store[night]["status"], verdict["counts"])
        )
    table = "\n".join("  ".join(map(str, row)) for row in observed)
    expected = []
    for night in NIGHTS:
        if night == REGRESSED:
            expected.append((night.isoformat(), "failed", "failed", "untrusted"))
        else:
            expected.append((night.isoformat(), "success", "success", "trusted"))
    assert [row[:4] for row in observed] == expected, f"night, DAG run, evaluate_gate, store status, counts:\n{table}"

    # In order means against history: only the first night is a cold start, every later one is
    # judged against the trusted nights before it. The packaged gates file is calibrated, so each
    # declaration says how many trusted nights it was judged against: the regressed night is one of
    # them for every declaration but the reward (trust per declaration).
    first, *later = observed
    assert first[4]["INACTIVE"] == RESULTS_PER_NIGHT, table
    for i, night in enumerate(NIGHTS):
        reward_nights = i - (1 if REGRESSED < night else 0)
        for d in verdicts[night]["declarations"]:
            expected_nights = reward_nights if d["metric_key"] == "rollout/raw_reward" else i
            assert d["nights"] == expected_nights, f"{night} {d['metric_key']} was judged without its history:\n{table}"
    regressed_counts = observed[NIGHTS.index(REGRESSED)][4]
    # every step of rollout/raw_reward FAILs, and so does the night as a whole
    assert regressed_counts["FAIL"] == 5, f"every step of rollout/raw_reward must FAIL:\n{table}"
    assert all(store[night]["role"] == "baseline" for night in NIGHTS)


def test_two_series_chains_in_one_dag_run_keep_their_histories_apart(
    airflow_stack: AirflowStack, workloads: Workloads
) -> None:
    """Two PersistValues/EvaluateGate chains in one DAG run: two store runs per night, each with its own values."""
    api = airflow_stack.api
    runs = _finished_backfill_runs(airflow_stack, TWO_SERIES_DAG, TWO_SERIES_NIGHTS)
    for night in TWO_SERIES_NIGHTS:
        run_id = runs[night]["dag_run_id"]
        # Airflow run ids are unique only inside one DAG: the nightly backfill has the same ones.
        where = "dag_id = %s AND airflow_run_id = %s"
        stored = {r["series"]: r for r in _store_runs(airflow_stack, where, TWO_SERIES_DAG, run_id)}
        assert set(stored) == set(TWO_SERIES), (
            f"{night}: store runs of DAG run {run_id} by series: {stored}\n"
            + airflow_stack.dag_run_report(TWO_SERIES_DAG, run_id)
        )
        assert stored["rl-7b"]["run_id"] != stored["rl-70b"]["run_id"]
        for series, (reward, grad_norm) in TWO_SERIES.items():
            slug = series.replace("-", "_")
            values = airflow_stack.store_query(
                "SELECT metric_key, value FROM metric_values WHERE run_id = %s", stored[series]["run_id"]
            )
            assert sorted({(k, v) for k, v in values}) == [
                ("rollout/raw_reward", reward),
                ("train/grad_norm", grad_norm),
            ], f"{night} {series}: stored values {values}"
            assert len(values) == 8, f"{night} {series}: 4 steps of each metric, got {values}"
            verdict = api.xcom_return_value(TWO_SERIES_DAG, run_id, f"evaluate_{slug}")
            assert (verdict["series"], verdict["run_id"]) == (series, stored[series]["run_id"]), verdict
            assert verdict["trusted"] is True, f"{night} {series}: {verdict}"
            assert stored[series]["status"] == "trusted", f"{night} {series}: {stored[series]}"
        assert runs[night]["state"] == "success", airflow_stack.dag_run_report(TWO_SERIES_DAG, run_id)

    # Each series' history holds its own values only.
    for series, (reward, _) in TWO_SERIES.items():
        history = airflow_stack.store_query(
            "SELECT DISTINCT v.value FROM metric_values v JOIN runs r ON r.run_id = v.run_id "
            "WHERE r.series = %s AND v.metric_key = 'rollout/raw_reward'",
            series,
        )
        assert history == [(reward,)], f"history of {series}: {history}"


def test_verdict_read_back_through_the_rest_api(
    airflow_stack: AirflowStack, nightly_runs: dict[date, dict[str, Any]]
) -> None:
    """metric_gate.evaluate_gate's XCom return_value, from /api/v2, is the versioned verdict of the stored run."""
    api = airflow_stack.api
    store = {run["night"]: run for run in _store_runs(airflow_stack, "series = %s", BACKFILL_SERIES)}
    for night in NIGHTS:
        verdict = api.xcom_return_value(NIGHTLY_DAG, nightly_runs[night]["dag_run_id"], "metric_gate.evaluate_gate")
        assert verdict["schema"] == VERDICT_SCHEMA
        assert set(verdict["counts"]) == STATUSES
        assert all(isinstance(n, int) and n >= 0 for n in verdict["counts"].values())
        # a result per coordinate, and one more for a declaration whose night failed as a whole (calibrated)
        nights_failed = sum(1 for r in verdict["results"] if r["status"] == "FAIL" and r["step"] is None)
        assert sum(verdict["counts"].values()) == RESULTS_PER_NIGHT + nights_failed, verdict["counts"]
        assert verdict["run_id"] == store[night]["run_id"]
        assert (verdict["series"], verdict["role"], verdict["enforced"]) == (BACKFILL_SERIES, "baseline", True)
        assert verdict["logical_date"].startswith(night.isoformat()), verdict["logical_date"]
        assert verdict["trusted"] is (store[night]["status"] == "trusted"), (verdict, store[night])
        failing = [r for r in verdict["results"] if r["status"] == "FAIL"]
        assert len(failing) == verdict["counts"]["FAIL"]
        for result in failing:  # which night fails is test (a)'s business; here each FAIL explains itself
            if result["step"] is None:  # the night as a whole (the packaged gates file is calibrated)
                assert result["bound"] in ("night", "constraint", "blowup", "drift") and result["reason"], result
                continue
            assert result["lo"] <= result["ref"] <= result["hi"], result
            current, lo, hi = result["current"], result["lo"], result["hi"]
            side = "below" if current < lo else "above" if current > hi else None
            assert result["side"] == side and side is not None, result
            assert result["bound"] in ("rel", "abs_floor", "constraint", "calibrated", "blowup"), result
            assert result["n"] >= 1, result


# -- Assets in and out, and the approval step (examples/assets_*.py) --------------------------------

PRODUCER_DAG, GATE_DAG, CONSUMER_DAG = "assets_training_job", "assets_metric_gate", "assets_promote_checkpoint"
ASSET_TIMEOUT = 300.0


def _finished_run(stack: AirflowStack, dag_id: str, count: int, what: str) -> dict[str, Any]:
    """Wait until the DAG has ``count`` runs and the newest has finished; return it."""

    def finished() -> dict[str, Any] | None:
        runs = sorted(stack.api.dag_runs(dag_id), key=lambda r: r["run_after"])
        if len(runs) < count or runs[-1]["state"] not in ("success", "failed"):
            return None
        return runs[-1]

    try:
        run = stack.wait_for(what, finished, ASSET_TIMEOUT, interval=2)
    except BaseException:
        _print_tasks(stack, dag_id)
        raise
    if run["state"] != "success":
        _print_tasks(stack, dag_id)
    return run


def _print_tasks(stack: AirflowStack, dag_id: str) -> None:
    """Print what each task of the DAG's runs did (states, rendered fields, log tails), for the report."""
    for run in stack.api.dag_runs(dag_id):
        for task_id, ti in stack.api.task_instances(dag_id, run["dag_run_id"]).items():
            print(f"{dag_id} {run['dag_run_id']} {task_id}: {ti['state']} {ti.get('rendered_fields')}")
            if ti["state"] in ("failed", "deferred", "up_for_retry"):
                try:
                    path = (f"/api/v2/dags/{dag_id}/dagRuns/{quote(run['dag_run_id'], safe='')}/taskInstances/"
                            f"{quote(task_id)}/logs/{ti['try_number'] or 1}?full_content=true")
                    log = stack.api.get(path)
                    print(str(log.get("content"))[-4000:])
                except Exception as err:  # noqa: BLE001 - a report only
                    print(f"(no log: {err})")


def _produce(stack: AirflowStack, night: str, reward: float) -> None:
    stack.api.post(f"/api/v2/dags/{PRODUCER_DAG}/dagRuns",
                   {"logical_date": None, "conf": {"night": night, "reward": reward,
                                                   "record_root": stack.env["METRIC_GATE_SYSTEM_ASSET_RECORDS"]}})


def test_assets_chain_a_trusted_night_to_the_consumer_and_approval_is_answered_over_rest(
    airflow_stack: AirflowStack,
) -> None:
    api = airflow_stack.api
    # A good night: the training job's event creates a baseline gate run named by the event's night.
    _produce(airflow_stack, "2026-07-01", 0.8)
    gate = _finished_run(airflow_stack, GATE_DAG, 1, "the asset-triggered gate run")
    assert (gate["run_type"], gate["state"]) == ("asset_triggered", "success"), gate
    tis = api.task_instances(GATE_DAG, gate["dag_run_id"])
    assert tis["metric_gate.publish_gated_metrics"]["state"] == "success"
    assert tis["metric_gate.approve_night"]["state"] == "skipped"  # nothing to approve
    verdict = api.xcom_return_value(GATE_DAG, gate["dag_run_id"], "metric_gate.evaluate_gate")
    assert (verdict["role"], verdict["logical_date"], verdict["trusted"]) == (
        "baseline", "2026-07-01T00:00:00+00:00", True)
    consumer = _finished_run(airflow_stack, CONSUMER_DAG, 1, "the consumer of the gated metrics event")
    assert (consumer["run_type"], consumer["state"]) == ("asset_triggered", "success")
    promoted = api.xcom_return_value(CONSUMER_DAG, consumer["dag_run_id"], "promote")
    assert promoted == {"promoted": "2026-07-01", "run_id": verdict["run_id"], "counts": verdict["counts"]}

    # A regressed night: the gate fails, no gated event, approve_night waits for an answer.
    _produce(airflow_stack, "2026-07-02", 0.4)
    run_id = airflow_stack.wait_for(
        "the regressed night's approval to wait",
        lambda: next((r["dag_run_id"] for r in api.dag_runs(GATE_DAG) if r["dag_run_id"] != gate["dag_run_id"]
                      and api.task_instances(GATE_DAG, r["dag_run_id"]).get("metric_gate.approve_night", {})
                      .get("state") in ("deferred", "awaiting_input")), None),
        ASSET_TIMEOUT, interval=2,
    )
    tis = api.task_instances(GATE_DAG, run_id)
    assert tis["metric_gate.evaluate_gate"]["state"] == "failed"
    assert tis["metric_gate.publish_gated_metrics"]["state"] == "upstream_failed"
    bad = api.xcom_return_value(GATE_DAG, run_id, "metric_gate.evaluate_gate")
    answer = api.request("PATCH", f"/api/v2/dags/{GATE_DAG}/dagRuns/{quote(run_id, safe='')}/taskInstances/"
                         "metric_gate.approve_night/-1/hitlDetails",
                         {"chosen_options": ["Mark the night trusted"], "params_input": {"reason": "eval set rerun"}})
    assert answer["chosen_options"] == ["Mark the night trusted"]
    airflow_stack.wait_for(
        "approve_night to carry out the answer",
        lambda: api.task_instances(GATE_DAG, run_id)["metric_gate.approve_night"]["state"] == "success" or None,
        ASSET_TIMEOUT, interval=2,
    )
    ((status, provenance),) = airflow_stack.store_query(
        "SELECT status, provenance FROM runs WHERE run_id = %s", bad["run_id"])
    marks = (provenance if isinstance(provenance, dict) else json.loads(provenance))["marks"]
    assert status == "trusted"
    assert marks[-1]["by"] and marks[-1]["by"] != "unknown" and "eval set rerun" in marks[-1]["reason"]
    assert len(api.dag_runs(CONSUMER_DAG)) == 1  # the regressed night announced nothing
