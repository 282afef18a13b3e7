"""A night written and judged in many small chunks gives the verdicts and rows of one chunk, on both stores."""

from __future__ import annotations

import json
import random
import re
from datetime import datetime, timedelta, timezone

import pytest

from airflow_metric_gate.chunking import CHUNK_POINTS_ENV
from airflow_metric_gate.declarations import declare
from airflow_metric_gate.pipeline import RunInfo, SeriesIdentity, evaluate, run_gate

pytestmark = pytest.mark.slow  # whole nights in many chunks, on both stores: 46 s in all

T0 = datetime(2026, 3, 1, tzinfo=timezone.utc)
NIGHTS = 6
STEPS = 1500
ONE_CHUNK = 10**9
SMALL_CHUNK = 7
BAND = {"rel_up": 0.2, "abs_floor_up": 0.0, "rel_down": 0.2, "abs_floor_down": 0.0}


GATES = [
    {"metric_key": "m/all", "steps": "all", "constraint": BAND},
    {"metric_key": "m/last", "steps": "last", "constraint": BAND},
    {"metric_key": "m/list", "steps": [900, 6, 3], "constraint": BAND},
    {"metric_key": "m/shuffled", "steps": "all", "constraint": BAND},
    {"metric_key": "m/absent", "steps": "all", "constraint": BAND},
    {"metric_key": "m/nan", "steps": "all", "constraint": BAND},
    {"metric_key": "m/all", "steps": "all", "constraint": {**BAND, "rel_up": 0.5}},
]


def _declarations(policy):
    return [declare(**gate, policy=policy) for gate in GATES]


def _write_night(path, night):
    """One night's record: a regressed stretch on the last night, steps in another order each night."""
    rng = random.Random(night)
    regressed = night == NIGHTS

    def value(step):
        base = 1.0 + 0.01 * ((step * 31 + night) % 7)
        return base * (1.6 if regressed and 400 <= step < 700 else 1.0)

    shuffled = list(range(300))
    rng.shuffle(shuffled)
    lines = [
        {"metric": "m/all", "series": [[s, value(s)] for s in range(STEPS)]},
        {"metric": "m/last", "series": [[s, value(s)] for s in range(50)] + [[60, "x"]]},
        {"metric": "m/list", "series": [[s, value(s)] for s in range(0, STEPS, 3)]},
        {"metric": "m/shuffled", "series": [[s, value(s)] for s in shuffled]},
        {"metric": "m/nan", "series": [[0, 1.0], [1, "NaN" if regressed else 1.0]]},
    ]
    if not regressed:  # the last night lacks it: an ERROR
        lines.append({"metric": "m/absent", "series": [[s, value(s)] for s in range(20)]})
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))


def _gate_nights(store, tmp_path, series, chunk, policy):
    verdicts = []
    for night in range(1, NIGHTS + 1):
        record = tmp_path / f"{series}-{night}.jsonl"
        _write_night(record, night)
        run = RunInfo(f"{series}-n{night}", "baseline", T0 + timedelta(days=night))
        verdicts.append(run_gate(store, record=record, declarations=_declarations(policy),
                                 identity=SeriesIdentity(series), run=run, all_results=True, chunk=chunk))
    return verdicts


def _values(store, run_id):
    return [(v.ordinal, v.metric_key, v.steps_key, v.step, v.value, v.at_step) for v in store.run_values(run_id)]


def _same_text(verdict, series):
    return json.loads(json.dumps(verdict).replace(series, "S"))


@pytest.mark.parametrize("policy", ["reference", "calibrated"])
def test_many_chunks_give_the_verdicts_and_rows_of_one(store, tmp_path, policy):
    one = _gate_nights(store, tmp_path, "chunk-one", ONE_CHUNK, policy)
    many = _gate_nights(store, tmp_path, "chunk-many", SMALL_CHUNK, policy)
    assert [_same_text(v, "chunk-one") for v in one] == [_same_text(v, "chunk-many") for v in many]
    last = one[-1]
    assert not last["trusted"] and last["counts"]["FAIL"] > 0 and last["counts"]["ERROR"] >= 2
    if policy == "reference":  # under calibrated the dropped point of m/last is an ERROR every night
        assert all(v["trusted"] for v in one[:-1])
        assert last["counts"]["PASS"] > 0 and last["counts"]["ERROR"] == 2
    for night in range(1, NIGHTS + 1):
        a, b = store.get_run(f"chunk-one-n{night}"), store.get_run(f"chunk-many-n{night}")
        assert (a.status, a.status_reason) == (b.status, b.status_reason)
        assert _values(store, f"chunk-one-n{night}") == _values(store, f"chunk-many-n{night}")
    # the default verdict (FAIL and ERROR only, at most 200) too, rebuilt read-only from the store
    for chunk_a, chunk_b in ((ONE_CHUNK, SMALL_CHUNK), (ONE_CHUNK, 1)):
        a = evaluate(store, f"chunk-one-n{NIGHTS}", record=False, chunk=chunk_a)
        b = evaluate(store, f"chunk-many-n{NIGHTS}", record=False, chunk=chunk_b)
        assert _same_text(a, "chunk-one") == _same_text(b, "chunk-many")
        assert a["truncated"] > 0


def test_small_chunks_are_taken(store, tmp_path, monkeypatch):
    sent, read = [], []
    bulk, execute = store._bulk_insert_values, store._execute

    def counting_bulk(cur, rows):
        sent.append(len(rows))
        return bulk(cur, rows)

    def counting_execute(cur, sql, params=()):
        if sql.startswith("SELECT coordinate, value, at_step FROM metric_points WHERE run_key = %s AND ("):
            read.append(sql.count("BETWEEN"))
        return execute(cur, sql, params)

    monkeypatch.setattr(store, "_bulk_insert_values", counting_bulk)
    monkeypatch.setattr(store, "_execute", counting_execute)
    monkeypatch.setenv(CHUNK_POINTS_ENV, "100")
    verdicts = _gate_nights(store, tmp_path, "env", None, "reference")
    values = sum(verdicts[-1]["counts"].values()) - verdicts[-1]["counts"]["ERROR"]
    assert max(sent) == 100 and len(sent) == NIGHTS * -(-values // 100)
    assert len(read) >= NIGHTS * (values // 100)
    assert max(read) > 1  # the shuffled metric's coordinates come in many ranges


def test_chunk_size_from_the_environment_is_checked(monkeypatch):
    from airflow_metric_gate.chunking import DEFAULT_CHUNK_POINTS, chunk_points

    monkeypatch.delenv(CHUNK_POINTS_ENV, raising=False)
    assert chunk_points() == DEFAULT_CHUNK_POINTS
    assert chunk_points(5) == 5
    monkeypatch.setenv(CHUNK_POINTS_ENV, "250")
    assert chunk_points() == 250
    for bad in ("0", "-3", "lots"):
        monkeypatch.setenv(CHUNK_POINTS_ENV, bad)
        with pytest.raises(ValueError, match=CHUNK_POINTS_ENV if bad == "lots" else "integer >= 1"):
            chunk_points()


class _TI:
    def __init__(self, night):
        self.dag_id, self.task_id, self.map_index, self.try_number = "nightly", "t", -1, 1
        self.run_id = f"scheduled__night{night}"
        self.pushed: dict = {}

    def xcom_push(self, key, value):
        self.pushed[key] = json.loads(json.dumps(value))


class _DagRun:
    run_type = "scheduled"

    def __init__(self, night):
        self.logical_date = self.run_after = T0 + timedelta(days=night)


def _operator_nights(tmp_path, series, policy):
    from airflow_metric_gate.operators.evaluate import EvaluateGateOperator
    from airflow_metric_gate.operators.ingest import IngestRecordOperator
    from airflow_metric_gate.operators.persist import PersistValuesOperator
    from airflow_metric_gate.operators.select import SelectStepsOperator

    gates = tmp_path / "gates.json"
    gates.write_text(json.dumps([{**gate, "policy": policy} for gate in GATES]))
    verdicts = []
    for night in range(1, NIGHTS + 1):
        record = tmp_path / f"{series}-{night}.jsonl"
        _write_night(record, night)
        ti = _TI(night)
        ctx = {"ti": ti, "dag_run": _DagRun(night), "logical_date": _DagRun(night).logical_date}
        summary = IngestRecordOperator(task_id="ingest_record", location=str(record)).execute(ctx)
        selection = SelectStepsOperator(task_id="select_steps", record=summary, gates_file=str(gates)).execute(ctx)
        persisted = PersistValuesOperator(task_id="persist_values", series=series, selection=selection).execute(ctx)
        EvaluateGateOperator(task_id="evaluate_gate", run=persisted).execute(ctx)
        # store run ids differ between the two series (a hash of the task's run and series)
        text = re.sub(r"af-[0-9a-f]{24}", "af-RUN", json.dumps(ti.pushed["return_value"]))
        verdicts.append(json.loads(text.replace(series, "S")))
    return verdicts


@pytest.mark.parametrize("policy", ["reference", "calibrated"])
def test_the_operators_give_the_same_verdicts_in_many_chunks(store_url, tmp_path, monkeypatch, policy):
    monkeypatch.setenv("AIRFLOW_CONN_METRIC_GATE_DB", store_url)
    monkeypatch.setenv(CHUNK_POINTS_ENV, str(ONE_CHUNK))
    one = _operator_nights(tmp_path, "op-one", policy)
    monkeypatch.setenv(CHUNK_POINTS_ENV, str(SMALL_CHUNK))
    many = _operator_nights(tmp_path, "op-many", policy)
    assert one == many
    assert not one[-1]["trusted"] and one[-1]["counts"]["FAIL"] > 0
