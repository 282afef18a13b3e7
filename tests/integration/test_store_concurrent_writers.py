"""One night, one writer's result: concurrent writers of one run id (issue 19, item 6).

Two Airflow tries of one task (a zombie and its retry, a clear while the old try still runs) write
the same store run id at once.  Whatever the interleaving, the run's stored values, status and
counts must come from one writer: never one writer's values with another writer's verdict, and
never two writers' values side by side.
"""

from __future__ import annotations

import json
import multiprocessing
import os
from datetime import datetime, timezone

import pytest

from airflow_metric_gate.cli import EXIT_OK, EXIT_STORE_UNAVAILABLE, main
from airflow_metric_gate.declarations.resolution import declare
from airflow_metric_gate.pipeline import evaluate
from airflow_metric_gate.store import RunRow, ValueRow, open_store
from airflow_metric_gate.store.errors import RunRewritten, StoreUnavailable

POINTS = 2000
WRITERS = 4
ROUNDS = 50
GATES = "gates:\n  - metric_key: m\n    steps: all\n    constraint: {rel_up: 0.2, rel_down: 0.2}\n"


def _record(path, value):
    path.write_text(json.dumps({"metric": "m", "series": [[s, value] for s in range(POINTS)]}) + "\n")
    return str(path)


def _gate(argv):
    """One ``metric-gate run`` in a process of its own; its exit status."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 1)
    os.dup2(devnull, 2)
    return main(argv)


@pytest.mark.slow
def test_concurrent_writers_of_one_night_never_mix_values_and_verdicts(tmp_path, store_url):
    gates = tmp_path / "gates.yaml"
    gates.write_text(GATES)
    ones, threes = _record(tmp_path / "ones.jsonl", 1.0), _record(tmp_path / "threes.jsonl", 3.0)
    base = ["run", "--gates", str(gates), "--series", "s", "--store", store_url]
    for day in (1, 2):  # a trusted history at 1.0: the 1.0 night passes, the 3.0 night fails
        assert main([*base[:1], ones, *base[1:], "--run-id", f"h{day}",
                     "--logical-date", f"2026-11-0{day}T00:00:00Z"]) == EXIT_OK
    night = ["--run-id", "n1", "--logical-date", "2026-11-03T00:00:00Z"]
    argvs = [[base[0], ones if i % 2 == 0 else threes, *base[1:], *night] for i in range(WRITERS)]
    mixed = []
    codes: set[int] = set()
    with multiprocessing.get_context("fork").Pool(WRITERS) as pool, open_store(store_url) as store:
        for round_ in range(ROUNDS):
            codes.update(pool.map(_gate, argvs, chunksize=1))
            run = store.get_run("n1")
            stored = store.run_values("n1")
            values = {v.value for v in stored}
            expected = ("trusted", f"{POINTS} PASS") if values == {1.0} else ("untrusted", f"{POINTS} FAIL")
            outcome = {o.get("o") for k, o in run.outcomes.items() if not k.startswith("_")}
            # one value a step (no writer's rows left beside another's: on PostgreSQL no unique key says so)
            if (len(values) != 1 or len(stored) != POINTS or len({v.step for v in stored}) != POINTS
                    or (run.status, run.status_reason) != expected or outcome != {expected[1][-4:].lower()}):
                mixed.append((round_, sorted(values), len(stored), run.status, run.status_reason, outcome))
    assert not mixed, f"{len(mixed)} of {ROUNDS} rounds left values and verdict of different writers: {mixed[:5]}"
    # a writer whose values another writer replaced before its verdict was kept says so and retries
    assert codes <= {EXIT_OK, EXIT_STORE_UNAVAILABLE}


GATE = declare("m", steps="all", constraint={"rel_up": 0.2, "rel_down": 0.2})


def _night(value):
    run = RunRow(run_id="n1", series="s", backend="cuda", suite="default", role="baseline", status="pending",
                 logical_date=datetime(2026, 11, 3, tzinfo=timezone.utc), declarations=[GATE.summary()])
    return run, [ValueRow(0, GATE.metric_key, GATE.steps_key, GATE.constraint_key, 0, value, 0)]


def test_each_write_of_a_run_id_gets_the_next_write_version(store):
    assert [store.write_night(*_night(v)).write_version for v in (1.0, 2.0, 3.0)] == [1, 2, 3]
    assert store.get_run("n1").write_version == 3


def test_a_verdict_for_replaced_values_is_not_kept(store):
    first = store.write_night(*_night(1.0)).write_version
    store.write_night(*_night(3.0))  # another writer of the same night
    with pytest.raises(RunRewritten, match="written again by another writer") as caught:
        store.set_status("n1", "trusted", "1 PASS", write_version=first)
    assert isinstance(caught.value, StoreUnavailable)  # retryable: a retry judges the values stored now
    assert store.get_run("n1").status == "pending"  # nothing was marked
    store.set_status("n1", "untrusted", "1 FAIL", write_version=first + 1)
    assert store.get_run("n1").status == "untrusted"


def test_evaluate_refuses_to_judge_values_it_did_not_write(store):
    first = store.write_night(*_night(1.0)).write_version
    store.write_night(*_night(3.0))
    with pytest.raises(RunRewritten):
        evaluate(store, "n1", write_version=first)
    assert store.get_run("n1").status == "pending"
    assert evaluate(store, "n1")["counts"]["INACTIVE"] == 1  # without a version: the values stored now
