"""Replay on both stores against a hand-computed sequence of nights."""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone

import pytest

from airflow_metric_gate.cli import main
from airflow_metric_gate.declarations import DeclarationError, declare
from airflow_metric_gate.pipeline import RunInfo, SeriesIdentity, evaluate, persist
from airflow_metric_gate.replay import render_replay, replay
from airflow_metric_gate.selection import Selection
from airflow_metric_gate.store import StoreInputError, StoreUnavailable, open_store

T0 = datetime(2026, 6, 1, tzinfo=timezone.utc)
IDENTITY = SeriesIdentity("job", "cuda", "nightly")
STORED = declare("loss", steps=[0], constraint={"rel_up": 0.1, "rel_down": 0.1})
LOOSE = declare("loss", steps=[0], constraint={"rel_up": 0.5, "rel_down": 0.5})
TIGHT = declare("loss", steps=[0], constraint={"rel_up": 0.03, "rel_down": 0.03})
# Nights as judged with STORED (history_limit 20, mean, min_history 1), by hand:
#   n1 10.0  no history                          INACTIVE  trusted
#   n2 10.5  ref 10                [9, 11]       PASS      trusted
#   n3 14.0  ref 10.25             [9.225, 11.275] FAIL    untrusted
#   n4 10.2  ref 10.25 (n3 not fed)               PASS      trusted
#   n5 11.6  ref 10.2333 [.., 11.2567]            FAIL      untrusted
#   n6 10.0  shadow: judged, never feeds          PASS      trusted
NIGHTS = [("n1", 10.0, "baseline"), ("n2", 10.5, "baseline"), ("n3", 14.0, "baseline"),
          ("n4", 10.2, "baseline"), ("n5", 11.6, "baseline"), ("n6", 10.0, "shadow")]


def _fill(store) -> None:
    for day, (run_id, value, role) in enumerate(NIGHTS):
        run = RunInfo(run_id, role=role, logical_date=T0 + timedelta(days=day))
        persist(store, IDENTITY, run, [Selection(STORED, points=[(0, value, 0)])])
        evaluate(store, run_id)


@pytest.fixture
def filled(store):
    _fill(store)
    return store


def _replay(store, **kw):
    return replay(store, IDENTITY.series, IDENTITY.backend, IDENTITY.suite, **kw)


def _statuses(report):
    return {n["run_id"]: (n["stored_status"], n["replayed_status"]) for n in report["nights"]}


def test_stored_declarations_and_settings_reproduce_the_stored_statuses(filled):
    report = _replay(filled)
    assert [n["run_id"] for n in report["nights"]] == ["n1", "n2", "n3", "n4", "n5", "n6"]
    assert all(stored == replayed for stored, replayed in _statuses(report).values())
    [gate] = report["declarations"]
    assert [f["run_id"] for f in gate["failed"]] == ["n3", "n5"]
    [fail] = gate["failed"][1]["results"]
    assert fail["ref"] == pytest.approx((10.0 + 10.5 + 10.2) / 3)
    assert fail["side"] == "above" and fail["step"] == 0
    assert report["summary"]["newly_failing"] == [] and report["summary"]["no_longer_failing"] == []


def test_a_looser_band_fails_nothing_and_its_trusted_nights_feed_later_baselines(filled):
    report = _replay(filled, declarations=[LOOSE])
    assert {k: v[1] for k, v in _statuses(report).items()} == dict.fromkeys(["n1", "n2", "n3", "n4", "n5", "n6"],
                                                                             "trusted")
    assert report["declarations"][0]["failed"] == []
    assert report["summary"]["no_longer_failing"] == ["n3", "n5"]


def test_a_tighter_band_with_replayed_trust_keeps_its_failing_nights_out_of_baselines(filled):
    report = _replay(filled, declarations=[TIGHT])
    gate = report["declarations"][0]
    # n2 10.5 vs ref 10 [9.7, 10.3] FAIL; n3 vs ref 10 FAIL; n4 10.2 vs ref 10 PASS;
    # n5 11.6 vs ref mean(10, 10.2) = 10.1 FAIL; n6 10.0 vs 10.1 PASS (shadow)
    assert [f["run_id"] for f in gate["failed"]] == ["n2", "n3", "n5"]
    refs = {f["run_id"]: f["results"][0]["ref"] for f in gate["failed"]}
    assert refs == pytest.approx({"n2": 10.0, "n3": 10.0, "n5": 10.1})
    assert gate["constraint_key"] == TIGHT.constraint_key
    assert report["summary"]["newly_failing"] == ["n2"]
    assert _statuses(report)["n6"] == ("trusted", "trusted")


def test_stored_trust_uses_the_stored_statuses_for_baselines(filled):
    report = _replay(filled, declarations=[TIGHT], trust="stored")
    gate = report["declarations"][0]
    refs = {f["run_id"]: f["results"][0]["ref"] for f in gate["failed"]}
    # n2 was stored trusted, so it feeds n3 and n5 here; n3 (stored untrusted) never feeds.
    assert refs == pytest.approx({"n2": 10.0, "n3": 10.25, "n5": (10.0 + 10.5 + 10.2) / 3})


def test_history_limit_and_min_history(filled):
    report = _replay(filled, history_limit=1, min_history=2)
    # min_history 2 with at most one baseline value: every coordinate INACTIVE, every night trusted
    assert report["summary"]["would_fail"] == 0
    assert report["summary"]["counts"] == {"INACTIVE": 6}
    report = _replay(filled, history_limit=1)
    gate = report["declarations"][0]
    refs = {f["run_id"]: f["results"][0]["ref"] for f in gate["failed"]}
    # the last trusted baseline night only: n3 vs n2 (10.5); n5 vs n4 (10.2)
    assert refs == pytest.approx({"n3": 10.5, "n5": 10.2})


def test_median_aggregate(filled):
    report = _replay(filled, declarations=[TIGHT], aggregate="median", trust="stored")
    refs = {f["run_id"]: f["results"][0]["ref"] for f in report["declarations"][0]["failed"]}
    assert refs["n5"] == pytest.approx(10.2)  # median of 10.0, 10.5, 10.2


def test_rebaseline_marker_starts_a_fresh_baseline(filled):
    filled.mark_rebaseline("n4")
    report = _replay(filled, declarations=[TIGHT], trust="stored")
    by_night = {f["run_id"]: f["results"][0] for f in report["declarations"][0]["failed"]}
    # n4 starts cold (INACTIVE); n5 compares with n4 only
    assert "n4" not in by_night
    assert by_night["n5"]["ref"] == pytest.approx(10.2)


def test_declarations_that_cannot_be_replayed_are_reported(filled):
    other_steps = declare("loss", steps="all", constraint={"rel_up": 0.1, "rel_down": 0.1})
    never = declare("accuracy", steps=[0], constraint={"rel_up": 0.1, "rel_down": 0.1})
    report = _replay(filled, declarations=[TIGHT, other_steps, never])
    assert len(report["declarations"]) == 1
    reasons = {g["metric_key"] + g["steps_key"]: g["reason"] for g in report["not_replayable"]}
    assert "[0]" in reasons['loss"all"'] and "re-keys" in reasons['loss"all"']
    assert "never stored" in reasons["accuracy[0]"]
    assert "not replayable" in render_replay(report)


def test_no_declaration_replayable_concludes_nothing(filled, store_url, tmp_path, capsys):
    never = declare("accuracy", steps=[0], constraint={"rel_up": 0.1, "rel_down": 0.1})
    report = _replay(filled, declarations=[never])
    assert report["declarations"] == [] and len(report["not_replayable"]) == 1
    assert {n["replayed_status"] for n in report["nights"]} == {None}  # no night judged, none trusted
    summary = report["summary"]
    assert summary["would_fail"] == 0 and summary["newly_failing"] == summary["no_longer_failing"] == []
    text = render_replay(report)
    assert "no declaration replayable" in text and "no longer failing" not in text
    gates = tmp_path / "gates.yaml"
    gates.write_text("gates:\n  - metric_key: loss\n    steps: all\n    constraint: {rel_up: 0.1, rel_down: 0.1}\n")
    assert main(["replay", "--series", "job", "--suite", "nightly", "--gates", str(gates),
                 "--store", store_url]) == 0
    out = capsys.readouterr().out
    assert "no declaration replayable" in out and "no longer failing" not in out


def test_replay_writes_nothing_and_reads_with_a_fixed_number_of_statements(filled):
    before = [(r.run_id, r.status, r.status_reason) for r, _ in filled.series_runs_and_blocks("job", "cuda", "nightly")]
    statements = []
    execute = filled._execute

    def counting(cur, sql, params=()):
        statements.append(sql)
        return execute(cur, sql, params)

    filled._execute = counting
    _replay(filled, declarations=[TIGHT])
    assert not any(s.lstrip().upper().startswith(("INSERT", "UPDATE", "DELETE")) for s in statements)
    assert len(statements) <= 2  # the runs, then every value in one ordered pass (6 nights or 600)
    filled._execute = execute
    after = [(r.run_id, r.status, r.status_reason) for r, _ in filled.series_runs_and_blocks("job", "cuda", "nightly")]
    assert after == before


def test_unknown_series_is_bad_input(filled):
    with pytest.raises(StoreInputError, match="no run of series") as caught:
        replay(filled, "nope", "cuda", "nightly")
    assert "stored under" not in str(caught.value)


def test_a_series_stored_under_another_suite_names_where_it_is(filled):
    with pytest.raises(StoreInputError) as caught:
        replay(filled, IDENTITY.series)  # the default suite, where nothing was stored
    assert str(caught.value) == (
        "the metric store has no run of series 'job' (backend 'cuda', suite 'default'); nothing to replay; "
        "it is stored under --backend cuda --suite nightly"
    )


def test_cli_replay(store_url, tmp_path, capsys):
    with open_store(store_url) as store:
        _fill(store)
    gates = tmp_path / "gates.yaml"
    gates.write_text("gates:\n  - metric_key: loss\n    steps: [0]\n    constraint: {rel_up: 0.03, rel_down: 0.03}\n")
    args = ["replay", "--series", "job", "--suite", "nightly", "--store", store_url, "--gates", str(gates)]
    assert main([*args, "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert [f["run_id"] for f in report["declarations"][0]["failed"]] == ["n2", "n3", "n5"]
    assert main([*args, "--history-limit", "1", "--min-history", "1", "--aggregate", "median",
                 "--trust", "stored"]) == 0
    out = capsys.readouterr().out
    assert "would fail" in out and "newly failing (stored trusted): n2" in out
    assert main(["replay", "--series", "nope", "--store", store_url]) == 2


def test_given_declarations_of_one_coordinate_are_collapsed_as_in_evaluation(filled):
    again = declare("loss", steps=[0], constraint={"rel_up": 0.03, "rel_down": 0.03})
    report = _replay(filled, declarations=[TIGHT, again])
    [gate] = report["declarations"]  # judged once, not twice
    assert [f["run_id"] for f in gate["failed"]] == ["n2", "n3", "n5"]
    assert report["summary"]["counts"] == _replay(filled, declarations=[TIGHT])["summary"]["counts"]
    [warning] = report["warnings"]
    assert "declared twice" in warning and "gated once" in warning
    assert "declared twice" in render_replay(report)
    warn = declare("loss", steps=[0], constraint={"rel_up": 0.03, "rel_down": 0.03}, severity="warn")
    with pytest.raises(DeclarationError, match="declared twice with different severity"):
        _replay(filled, declarations=[TIGHT, warn])


def test_cli_replay_checks_a_coordinate_declared_twice(store_url, tmp_path, capsys):
    with open_store(store_url) as store:
        _fill(store)
    gate = "  - metric_key: loss\n    steps: [0]\n    constraint: {rel_up: 0.03, rel_down: 0.03}\n"
    args = ["replay", "--series", "job", "--suite", "nightly", "--store", store_url, "--gates"]
    conflicting = tmp_path / "conflicting.yaml"
    conflicting.write_text("gates:\n" + gate + gate + "    severity: warn\n")
    assert main([*args, str(conflicting)]) == 2
    assert "declared twice with different severity" in capsys.readouterr().err
    identical = tmp_path / "identical.yaml"
    identical.write_text("gates:\n" + gate + gate)
    assert main([*args, str(identical), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    [declaration] = report["declarations"]
    assert declaration["nights_judged"] == 6
    assert report["summary"]["counts"] == {"INACTIVE": 1, "PASS": 2, "FAIL": 3}
    assert "gated once" in report["warnings"][0]


FORGED_KEY = "evil\nmetric-gate: forged run: TRUSTED\x1b[31m"
FORGED_SERIES = "job\nmetric-gate: job run n2: TRUSTED\x1b[2K"


def _own_lines(text):
    return [line for line in text.splitlines() if line.startswith("metric-gate:")]


def test_control_characters_in_stored_names_are_escaped_in_the_report(store_url, tmp_path, capsys):
    forged = declare(FORGED_KEY, steps=[0], constraint={"rel_up": 0.1, "rel_down": 0.1})
    identity = SeriesIdentity(FORGED_SERIES, "cuda", "nightly")
    with open_store(store_url) as store:
        for day, (run_id, value) in enumerate([("n1\x1b[2K", 10.0), ("n2\nmetric-gate: x: TRUSTED", 20.0)]):
            run = RunInfo(run_id, logical_date=T0 + timedelta(days=day))
            persist(store, identity, run, [Selection(forged, points=[(0, value, 0)])])
            evaluate(store, run_id)
        stored = replay(store, FORGED_SERIES, "cuda", "nightly")
        never = declare("nope\nmetric-gate: TRUSTED", steps=[0], constraint={"rel_up": 0.1, "rel_down": 0.1})
        given = replay(store, FORGED_SERIES, "cuda", "nightly", declarations=[forged, never])
    assert stored["declarations"][0]["metric_key"] == FORGED_KEY  # the report itself keeps the names
    for report in (stored, given):
        text = render_replay(report)
        assert "\x1b" not in text and not _own_lines(text)
        assert "evil\\nmetric-gate: forged run: TRUSTED\\x1b[31m" in text  # escaped, still readable
        assert "n2\\nmetric-gate: x: TRUSTED" in text  # the failing night's run id
    assert "nope\\nmetric-gate: TRUSTED" in render_replay(given)  # the not-replayable line
    assert main(["replay", "--series", FORGED_SERIES, "--suite", "nightly", "--store", store_url]) == 0
    out = capsys.readouterr().out
    assert "\x1b" not in out and not _own_lines(out)
    assert "job\\nmetric-gate: job run n2: TRUSTED\\x1b[2K" in out


def test_a_night_written_while_replay_reads_is_an_outage_to_retry_never_a_misjudged_report(store_url):
    # A night is stored between replay's two reads: the runs it read no longer match the values it
    # streams, so values would be judged against other coordinates' histories.
    a = declare("a", steps=[0], constraint={"rel_up": 0.1, "rel_down": 0.1})
    b = declare("b", steps=[0], constraint={"rel_up": 0.1, "rel_down": 0.1})
    with open_store(store_url) as store:
        for day in range(4):
            run = RunInfo(f"n{day}", logical_date=T0 + timedelta(days=day))
            persist(store, IDENTITY, run, [Selection(a, points=[(0, 1.0, 0)]), Selection(b, points=[(0, 100.0, 0)])])
            evaluate(store, run.run_id)
        read_values = store.iter_series_point_batches

        def a_backfill_lands_first(*args, **kwargs):
            with open_store(store_url) as writer:
                late = RunInfo("n1b", logical_date=T0 + timedelta(days=1, hours=12))
                persist(writer, IDENTITY, late, [Selection(a, points=[(0, 1.0, 0)])])
            return read_values(*args, **kwargs)

        store.iter_series_point_batches = a_backfill_lands_first
        with pytest.raises(StoreUnavailable, match="changed while replay read them"):
            _replay(store)
        store.iter_series_point_batches = read_values
        report = _replay(store)  # run again: five nights, nothing misjudged
        assert [n["run_id"] for n in report["nights"]] == ["n0", "n1", "n1b", "n2", "n3"]
        assert report["summary"]["would_fail"] == 0
