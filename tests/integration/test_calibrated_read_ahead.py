"""Evaluate reads the next calibrated declaration's night while it judges the last one (PostgreSQL).

The read runs on one reading thread; the verdict must be the one a read-then-judge loop gives, a
failure on either side must end the reading before it is raised, and nothing may be left reading.
"""

from __future__ import annotations

import json
import math
import random
import threading
import time

import pytest

from airflow_metric_gate.cli import main
from airflow_metric_gate.pipeline import evaluate
from airflow_metric_gate.pipeline import history as pipeline_history
from airflow_metric_gate.store import StoreUnavailable, open_store
from airflow_metric_gate.store.postgres import PostgresStore

pytestmark = pytest.mark.postgres

METRICS = ("train/loss", "train/grad_norm", "rollout/raw_reward", "train/ppo_kl")
GATES = "policy: calibrated\ngates:\n" + "".join(
    f"  - metric_key: {m}\n    steps: all\n    constraint: {{rel_up: 0.5, rel_down: 0.5}}\n    enforce: true\n"
    for m in METRICS)


def _nights(tmp_path, capsys, url, nights=8):
    gates = tmp_path / "gates.yaml"
    gates.write_text(GATES)
    rng = random.Random(5)
    for day in range(nights):
        shared = rng.gauss(0.0, 0.02)
        factor = 1.3 if day == nights - 1 else 1.0  # the last night: the loss regressed
        lines = [{"metric": m, "series": [[s, (1.0 + i) * (1 + shared + rng.gauss(0, 0.03))
                                            * (factor if m == "train/loss" else 1.0) * math.exp(-s / 200)]
                                          for s in range(40)]} for i, m in enumerate(METRICS)]
        record = tmp_path / f"n{day}.jsonl"
        record.write_text("".join(json.dumps(x) + "\n" for x in lines))
        code = main(["run", str(record), "--gates", str(gates), "--series", "rl", "--store", url,
                     "--run-id", f"n{day}", "--logical-date", f"2026-01-{day + 1:02d}T00:00:00Z", "--json"])
        assert code in (0, 1), capsys.readouterr().err
    capsys.readouterr()
    return f"n{nights - 1}"


@pytest.fixture
def stored(tmp_path, capsys, pg_url):
    """The store with eight nights gated, and the last night's run id (to evaluate again)."""
    run_id = _nights(tmp_path, capsys, pg_url)
    store = open_store(pg_url)
    yield store, run_id
    store.close()


def _readers() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name.startswith("metric-gate-read")]


def test_reading_ahead_gives_the_verdict_of_reading_one_declaration_at_a_time(tmp_path, capsys, pg_url,
                                                                            monkeypatch):
    run_id = _nights(tmp_path, capsys, pg_url)
    store = open_store(pg_url)
    assert isinstance(store, PostgresStore) and store.reads_ahead
    threads: list[str] = []
    read = PostgresStore.declaration_night

    def watched(self, *args, **kwargs):
        threads.append(threading.current_thread().name)
        return read(self, *args, **kwargs)

    monkeypatch.setattr(PostgresStore, "declaration_night", watched)
    ahead = evaluate(store, run_id, record=False, all_results=True)
    assert len(threads) == len(METRICS) and all(name.startswith("metric-gate-read") for name in threads)
    monkeypatch.setattr(PostgresStore, "reads_ahead", False)
    threads.clear()
    one_by_one = evaluate(store, run_id, record=False, all_results=True)
    assert threads == [threading.current_thread().name] * len(METRICS)
    store.close()
    assert json.dumps(ahead, sort_keys=True) == json.dumps(one_by_one, sort_keys=True)
    assert ahead["trusted"] is False and any(r["metric_key"] == "train/loss" and r["status"] == "FAIL"
                                             for r in ahead["results"])
    assert not _readers()


def test_a_failure_while_judging_ends_the_reading_before_it_is_raised(stored, monkeypatch):
    store, run_id = stored
    judge, read = pipeline_history.judge_calibrated, PostgresStore.declaration_night
    judged: list[int] = []
    reads: list[tuple] = []
    reading = threading.Event()
    still_reading: list[bool] = []

    def slow_read(self, run, key, *args, **kwargs):
        reading.set()
        reads.append(key)
        try:
            if len(reads) == 3:  # read while the second declaration is judged, and slowly
                time.sleep(0.5)
            return read(self, run, key, *args, **kwargs)
        finally:
            reading.clear()

    def failing(*args, **kwargs):
        judged.append(1)
        if len(judged) == 2:
            assert reading.wait(5)  # the third declaration's read has begun
            raise RuntimeError("judging failed")
        return judge(*args, **kwargs)

    monkeypatch.setattr(PostgresStore, "declaration_night", slow_read)
    monkeypatch.setattr(pipeline_history, "judge_calibrated", failing)
    try:
        evaluate(store, run_id, record=False)
    except RuntimeError as error:
        still_reading.append(reading.is_set())
        assert str(error) == "judging failed"
    assert still_reading == [False] and not _readers()
    monkeypatch.setattr(pipeline_history, "judge_calibrated", judge)
    assert evaluate(store, run_id, record=False)["trusted"] is False  # the store's connection is fine


def test_a_read_failure_is_raised_at_its_declaration(stored, monkeypatch):
    store, run_id = stored
    judge, read = pipeline_history.judge_calibrated, PostgresStore.declaration_night
    judged: list[tuple] = []
    reads: list[tuple] = []

    def failing_read(self, run, key, *args, **kwargs):
        reads.append(key)
        if len(reads) == 3:
            raise StoreUnavailable("the store went away")
        return read(self, run, key, *args, **kwargs)

    def counted(values, *args, **kwargs):
        judged.extend(values)
        return judge(values, *args, **kwargs)

    monkeypatch.setattr(PostgresStore, "declaration_night", failing_read)
    monkeypatch.setattr(pipeline_history, "judge_calibrated", counted)
    with pytest.raises(StoreUnavailable, match="the store went away"):
        evaluate(store, run_id, record=False)
    assert judged == reads[:2] and len(reads) == 3 and not _readers()
