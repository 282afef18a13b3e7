"""The opt-in ``band: mad`` and ``severity: warn`` through evaluate, replay and the command line, on both stores."""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone

import pytest

from airflow_metric_gate.cli import main
from airflow_metric_gate.declarations import declare
from airflow_metric_gate.pipeline import RunInfo, SeriesIdentity, evaluate, persist
from airflow_metric_gate.replay import render_replay, replay
from airflow_metric_gate.schemas.verdict import VerdictSchema
from airflow_metric_gate.selection import Selection

T0 = datetime(2026, 6, 1, tzinfo=timezone.utc)
IDENTITY = SeriesIdentity("job", "cuda", "nightly")
WIDE = {"rel_up": 0.5, "rel_down": 0.5}
PLAIN = declare("loss", steps=[0], constraint=WIDE)
MAD = declare("loss", steps=[0], constraint=WIDE, band="mad", mad_k=3)
# Nights by hand (history_limit 20, min_history 1).  n1..n10 have fewer than 10 baseline values, so
# the constraint band judges them ([5, 15] around ~10): all pass.  From n11 on, with band: mad:
#   n11 10.8  history n1..n10: sorted 9.6 9.7 9.8 9.9 10.0 10.0 10.1 10.2 10.3 10.4, median 10.0;
#             |v - 10|: 0 0 .1 .1 .2 .2 .3 .3 .4 .4, MAD 0.2; band 10 -+ 3 x 0.2 = [9.4, 10.6]  FAIL above
#   n12 10.5  same history (n11 untrusted, not fed)                                  PASS
#   n13  9.3  history n1..n10 + n12: median 10.0, MAD 0.2, [9.4, 10.6]                FAIL below
# The constraint band alone ([5, 15]) passes every night.
VALUES = [10.0, 10.2, 9.8, 10.4, 9.6, 10.0, 10.1, 9.9, 10.3, 9.7, 10.8, 10.5, 9.3]
NIGHTS = [f"n{i}" for i in range(1, len(VALUES) + 1)]


def _fill(store, declaration):
    verdicts = {}
    for day, (run_id, value) in enumerate(zip(NIGHTS, VALUES)):
        run = RunInfo(run_id, logical_date=T0 + timedelta(days=day))
        persist(store, IDENTITY, run, [Selection(declaration, points=[(0, value, 0)])])
        verdicts[run_id] = evaluate(store, run_id, all_results=True)
    return verdicts


def test_the_mad_band_judges_from_ten_baseline_values_on(store):
    verdicts = _fill(store, MAD)
    untrusted = [r for r, v in verdicts.items() if not v["trusted"]]
    assert untrusted == ["n11", "n13"]
    [n10] = verdicts["n10"]["results"]
    assert n10["status"] == "PASS" and n10["n"] == 9 and n10["lo"] == pytest.approx(10.0 / 2, rel=0.05)
    [fail] = verdicts["n11"]["results"]
    assert fail["status"] == "FAIL" and fail["bound"] == "mad" and fail["side"] == "above" and fail["n"] == 10
    assert fail["ref"] == pytest.approx(10.0)
    assert (fail["lo"], fail["hi"]) == (pytest.approx(9.4), pytest.approx(10.6))
    assert fail["reason"] == "10.8 is above hi 10.6 (mad band: ref 10 + 3 x MAD 0.2 = 0.6; median of n=10); off by 0.2"
    assert verdicts["n12"]["results"][0]["status"] == "PASS"
    [low] = verdicts["n13"]["results"]
    assert low["side"] == "below" and low["n"] == 11 and low["bound"] == "mad"
    VerdictSchema().load(verdicts["n11"])
    stored = store.get_run("n11").declarations[0]
    assert (stored["band"], stored["mad_k"]) == ("mad", 3.0)


def test_replay_with_the_mad_band_on_nights_stored_without_it(store):
    verdicts = _fill(store, PLAIN)
    assert all(v["trusted"] for v in verdicts.values())
    assert "band" not in store.get_run("n1").declarations[0]  # default declarations are stored as before
    report = replay(store, IDENTITY.series, IDENTITY.backend, IDENTITY.suite, declarations=[MAD])
    [gate] = report["declarations"]
    assert [f["run_id"] for f in gate["failed"]] == ["n11", "n13"]
    assert gate["failed"][0]["results"][0]["bound"] == "mad"
    assert report["summary"]["newly_failing"] == ["n11", "n13"]


def test_stored_mad_declarations_replay_to_their_stored_statuses(store):
    _fill(store, MAD)
    report = replay(store, IDENTITY.series, IDENTITY.backend, IDENTITY.suite)
    assert all(n["stored_status"] == n["replayed_status"] for n in report["nights"])
    assert [f["run_id"] for f in report["declarations"][0]["failed"]] == ["n11", "n13"]
    assert report["declarations"][0]["band"] == "mad"


def _two_gates_night(store, run_id, day, loss, reward, warn):
    gates = [declare("loss", steps=[0], constraint={"rel_up": 0.1, "rel_down": 0.1},
                     severity="warn" if warn else "fail"),
             declare("reward", steps=[0], constraint={"rel_up": 0.1, "rel_down": 0.1})]
    run = RunInfo(run_id, logical_date=T0 + timedelta(days=day))
    persist(store, IDENTITY, run, [Selection(gates[0], points=[(0, loss, 0)]),
                                   Selection(gates[1], points=[(0, reward, 0)])])
    return evaluate(store, run_id, enforce=True)


def test_a_warn_declaration_never_blocks_and_its_night_stays_untrusted(store):
    _two_gates_night(store, "w1", 0, 1.0, 1.0, warn=True)
    verdict = _two_gates_night(store, "w2", 1, 2.0, 1.0, warn=True)  # loss regressed: a warning only
    assert verdict["trusted"] is False and verdict["blocking"] == 0 and verdict["counts"]["FAIL"] == 1
    assert verdict["summary"][0]["severity"] == "warn" and verdict["results"][0]["severity"] == "warn"
    assert store.get_run("w2").status == "untrusted"  # the regressed value feeds no baseline
    assert store.get_run("w2").declarations[0]["severity"] == "warn"
    verdict = _two_gates_night(store, "w3", 2, 2.0, 2.0, warn=True)  # and a fail declaration still blocks
    assert verdict["blocking"] == 1 and verdict["counts"]["FAIL"] == 2
    blocking = [e for e in verdict["summary"] if "severity" not in e]
    assert [e["metric_key"] for e in blocking] == ["reward"]
    # the w2 value never entered the baseline: w3's loss is judged against w1 alone
    assert next(r for r in verdict["results"] if r["metric_key"] == "loss")["n"] == 1


def test_metric_gate_run_exits_zero_on_a_warning_even_when_enforced(capsys, tmp_path, store_url):
    gates = tmp_path / "gates.yaml"
    gates.write_text("gates:\n  - metric_key: loss\n    steps: all\n    constraint: {rel_up: 0.1, rel_down: 0.1}\n"
                     "    severity: warn\n")
    codes = []
    for day, value in ((1, 1.0), (2, 3.0)):
        record = tmp_path / f"n{day}.jsonl"
        record.write_text(json.dumps({"metric": "loss", "series": [[0, value], [1, value]]}) + "\n")
        codes.append(main(["run", str(record), "--gates", str(gates), "--series", "rl", "--store", store_url,
                           "--run-id", f"n{day}", "--logical-date", f"2026-11-{day:02d}T00:00:00Z", "--enforce"]))
    out = capsys.readouterr().out
    assert codes == [0, 0]
    assert 'WARNING loss (steps "all"): 2 of 2 steps FAIL' in out
    assert "NOT-TRUSTED" in out and "this run fails the gate" not in out


def test_the_replay_report_names_the_options_a_declaration_has_on(store):
    _fill(store, PLAIN)
    report = replay(store, IDENTITY.series, IDENTITY.backend, IDENTITY.suite,
                    declarations=[declare("loss", steps=[0], constraint=WIDE, band="mad", mad_k=3, severity="warn")])
    text = render_replay(report)
    assert "loss steps=[0] constraint=" in text
    assert " band=mad mad_k=3 severity=warn: 2 of 13 night(s) would fail" in text
