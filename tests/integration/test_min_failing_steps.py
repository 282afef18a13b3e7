"""The opt-in persistence rule ``min_failing_steps``: isolated failures are tolerated, the default is unchanged."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest

from airflow_metric_gate.declarations import DeclarationError, GateDeclaration, declare, load_gates_file
from airflow_metric_gate.pipeline import RunInfo, SeriesIdentity, evaluate, persist
from airflow_metric_gate.replay import replay
from airflow_metric_gate.selection import Selection

T0 = datetime(2026, 6, 1, tzinfo=timezone.utc)
BAND = {"rel_up": 0.1, "rel_down": 0.1}
CLEAN = [1.0, 1.0, 1.0, 1.0]


def _night(store, declaration, day, values, series="job", **kw):
    run = RunInfo(f"{series}{declaration.min_failing_steps}-{day}", logical_date=T0 + timedelta(days=day))
    selections = [Selection(declaration, points=[(i, v, i) for i, v in enumerate(values)])]
    persist(store, SeriesIdentity(series, "cuda", "nightly"), run, selections)
    return evaluate(store, run.run_id, **kw)


@pytest.mark.parametrize("k, one_spike_trusted, two_fails_trusted", [(1, False, False), (2, True, False),
                                                                     (3, True, True)])
def test_a_declaration_fails_only_when_enough_of_its_steps_leave_the_band(store, k, one_spike_trusted,
                                                                          two_fails_trusted):
    d = declare("loss", steps="all", constraint=BAND, min_failing_steps=k)
    _night(store, d, 0, CLEAN)
    spike = _night(store, d, 1, [1.0, 3.0, 1.0, 1.0], all_results=True)
    assert spike["trusted"] is one_spike_trusted
    statuses = [r["status"] for r in spike["results"]]
    if one_spike_trusted:
        assert statuses == ["PASS"] * 4 and spike["counts"]["FAIL"] == 0
        assert "tolerated: 1 of the declaration's 4 step(s) left the band" in spike["results"][1]["reason"]
    else:
        assert statuses.count("FAIL") == 1
    _night(store, d, 0, CLEAN, series="other")  # a series of its own: a tolerated spike feeds its baseline
    shifted = _night(store, d, 1, [1.0, 1.0, 1.5, 1.5], series="other")
    assert shifted["trusted"] is two_fails_trusted
    assert len(shifted["results"]) == (0 if two_fails_trusted else 2)  # tolerated results are not listed


def test_fewer_selected_steps_than_min_failing_steps_still_fail(store):
    d = declare("loss", steps=[0], constraint=BAND, min_failing_steps=5)
    _night(store, d, 0, [1.0])
    assert _night(store, d, 1, [2.0])["trusted"] is False


def test_default_declarations_store_and_serialize_as_before(store):
    d = declare("loss", steps="all", constraint=BAND)
    assert d.min_failing_steps == 1 and "min_failing_steps" not in d.to_dict()
    _night(store, d, 0, CLEAN)
    assert "min_failing_steps" not in store.get_run("job1-0").declarations[0]
    k = declare("loss", steps="all", constraint=BAND, min_failing_steps=2)
    assert GateDeclaration.from_dict(k.to_dict()) == k
    assert k.coordinate == d.coordinate  # the rule does not re-key the coordinates


def test_gates_file_field_is_validated(tmp_path):
    good = tmp_path / "g.yaml"
    good.write_text("gates:\n  - metric_key: train/grad_norm\n    min_failing_steps: 3\n")
    assert load_gates_file(good)[0].min_failing_steps == 3
    for bad in ("0", "true", "1.5"):
        path = tmp_path / "bad.yaml"
        path.write_text(f"gates:\n  - metric_key: train/grad_norm\n    min_failing_steps: {bad}\n")
        with pytest.raises(DeclarationError, match="min_failing_steps.*int >= 1"):
            load_gates_file(path)


def test_replay_applies_the_rule_like_evaluation(store):
    plain = declare("loss", steps="all", constraint=BAND)
    for day, values in enumerate([CLEAN, [1.0, 3.0, 1.0, 1.0], CLEAN, [1.0, 1.0, 1.5, 1.5]]):
        _night(store, plain, day, values)
    stored = {r.run_id: r.status for r, _ in store.series_runs_and_blocks("job", "cuda", "nightly")}
    assert stored == {"job1-0": "trusted", "job1-1": "untrusted", "job1-2": "trusted", "job1-3": "untrusted"}
    report = replay(store, "job", "cuda", "nightly",
                    declarations=[declare("loss", steps="all", constraint=BAND, min_failing_steps=2)])
    assert [f["run_id"] for f in report["declarations"][0]["failed"]] == ["job1-3"]
    assert report["summary"]["no_longer_failing"] == ["job1-1"]
