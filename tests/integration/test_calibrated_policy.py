"""The calibrated policy through the command line and the Python API, on SQLite and on the real Postgres."""

from __future__ import annotations

import json
import math
import random

import pytest
import yaml

from airflow_metric_gate.cli import main
from airflow_metric_gate.declarations import DeclarationError
from airflow_metric_gate.replay import replay
from airflow_metric_gate.schemas.verdict import VerdictSchema
from airflow_metric_gate.store import open_store

STEPS = 60
GATES = """\
policy: calibrated
gates:
  - metric_key: rollout/raw_reward
    enforce: true
  - metric_key: eval/f1_scroe
    steps: last
    constraint: {rel_up: 0.1, rel_down: 0.1}
"""


def _record(path, rng, *, reward_factor=1.0, grad_factor=1.0):
    shared = rng.gauss(0.0, 0.015)
    reward = [[s, (0.2 + 0.6 * (1 - math.exp(-4 * s / STEPS))) * (1 + shared + rng.gauss(0, 0.02)) * reward_factor]
              for s in range(STEPS)]
    grad = [[s, (1.0 + rng.gauss(0, 0.05)) * grad_factor] for s in range(STEPS)]
    lines = [{"metric": "rollout/raw_reward", "series": reward}, {"metric": "train/grad_norm", "series": grad}]
    path.write_text("".join(json.dumps(x) + "\n" for x in lines))
    return str(path)


def _run(capsys, *argv):
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


def _night(capsys, tmp_path, store_url, day, rng, gates, *extra, **factors):
    record = _record(tmp_path / f"night{day}.jsonl", rng, **factors)
    code, out, err = _run(capsys, "run", record, "--gates", gates, "--series", "rl", "--store", store_url,
                          "--run-id", f"night-{day:03d}", "--logical-date", _date(day), "--json", *extra)
    assert code in (0, 1), err
    verdict = json.loads(out)
    VerdictSchema().load(verdict)  # every new section validates
    return code, verdict


def _trusted_start(capsys, tmp_path, store_url, gates_text, seed, nights):
    """Write the gates file and run ``nights`` clean nights, each trusted; return the file and the generator."""
    gates = tmp_path / "gates.yaml"
    gates.write_text(gates_text)
    rng = random.Random(seed)
    for day in range(nights):
        code, verdict = _night(capsys, tmp_path, store_url, day, rng, gates)
        assert code == 0 and verdict["trusted"], verdict["results"][:2]
    return gates, rng


def _date(day):
    return f"2026-{1 + day // 28:02d}-{1 + day % 28:02d}T00:00:00Z"


def test_a_misspelt_declaration_does_not_starve_the_others(capsys, tmp_path, store_url):
    """The report-only advice of getting-started, followed with a typo: the enforced reward still gates."""
    gates = tmp_path / "gates.yaml"
    gates.write_text(GATES)
    rng = random.Random(1)
    for day in range(10):
        code, verdict = _night(capsys, tmp_path, store_url, day, rng, gates)
        assert verdict["policy"] == "calibrated" and verdict["trusted"] is False  # the typo errs every night
        assert code == 0  # not enforced: the typo reports, never blocks
    reward = next(d for d in verdict["declarations"] if d["metric_key"] == "rollout/raw_reward")
    assert reward["outcome"] == "pass" and reward["nights"] == 9  # fed by every night, whatever the typo did
    starved = {s["metric_key"]: s["reason"] for s in verdict.get("starved", [])}
    assert "rollout/raw_reward" not in starved
    code, verdict = _night(capsys, tmp_path, store_url, 10, rng, gates, reward_factor=0.89)  # -11 %
    assert code == 1 and verdict["blocking"] >= 1
    assert any(r["metric_key"] == "rollout/raw_reward" and r.get("blocking") for r in verdict["results"])


def test_the_reference_policy_names_the_cause_of_a_starved_baseline(capsys, tmp_path, store_url):
    gates = tmp_path / "gates.yaml"
    gates.write_text(GATES.replace("policy: calibrated\n", ""))
    rng = random.Random(2)
    for day in range(4):
        _, verdict = _night(capsys, tmp_path, store_url, day, rng, gates, "--all")
    assert "policy" not in verdict  # the reference verdict keeps its shape
    [starved] = [s for s in verdict["starved"] if s["metric_key"] == "rollout/raw_reward"]
    assert starved["reason"].startswith("starved baseline: no trusted night since 2026-01-01: every one of the 3 "
                                        "earlier night(s) was untrusted, the latest because eval/f1_scroe: ")
    assert "absent from the record" in starved["reason"]
    inactive = [r for r in verdict["results"] if r["metric_key"] == "rollout/raw_reward"]
    assert inactive and all(r["reason"] == starved["reason"] for r in inactive)


def test_a_level_shift_pages_once_and_accept_rebaselines_from_its_nights(capsys, tmp_path, store_url):
    reward = "policy: calibrated\ngates:\n  - metric_key: rollout/raw_reward\n    enforce: true\n"
    gates, rng = _trusted_start(capsys, tmp_path, store_url, reward, 3, 10)
    pages = []
    for day in range(10, 13):  # a new dataset version: the reward is 25 % lower from now on
        code, verdict = _night(capsys, tmp_path, store_url, day, rng, gates, reward_factor=0.75)
        pages.append(code)
    assert pages == [1, 0, 0]  # the first night pages; the next ones continue the shift
    [shift] = verdict["level_shifts"]
    assert shift["since_run_id"] == "night-010" and shift["nights"] == 3 and shift["change"] < -0.15
    # the text report (the task log, metric-gate run) says it once and what to do
    record = _record(tmp_path / "again.jsonl", rng, reward_factor=0.75)
    code, out, _ = _run(capsys, "run", record, "--gates", gates, "--series", "rl", "--store", store_url,
                        "--run-id", "night-012", "--logical-date", _date(12))
    assert code == 0 and "LEVEL SHIFT rollout/raw_reward (steps \"all\") since 2026-01-11" in out
    assert "not paging again" in out and "metric-gate accept --series rl --backend cuda --suite default --since " \
        "night-010" in out
    code, out, err = _run(capsys, "accept", "--series", "rl", "--since", shift["since_run_id"], "--reason",
                          "dataset v4", "--store", store_url)
    assert code == 0 and "3 of 3 night(s) marked trusted" in out, err
    # idempotent: a second accept (a retry, a second person) changes no night's status or marker
    with open_store(store_url) as store:
        before = [(r.run_id, r.status, r.rebaseline) for r in store.list_runs(series="rl", limit=100)]
    code, out, err = _run(capsys, "accept", "--series", "rl", "--since", shift["since_run_id"], "--reason",
                          "dataset v4", "--store", store_url)
    assert code == 0 and "0 of 3 night(s) marked trusted" in out, (out, err)
    with open_store(store_url) as store:
        assert [(r.run_id, r.status, r.rebaseline) for r in store.list_runs(series="rl", limit=100)] == before
    code, verdict = _night(capsys, tmp_path, store_url, 13, rng, gates, reward_factor=0.75)
    assert code == 0 and verdict["trusted"]
    # the accepted nights are the history: three of them, not one
    assert next(d for d in verdict["declarations"])["nights"] == 3
    code, out, err = _run(capsys, "accept", "--series", "rl", "--since", "not-a-night", "--reason", "x",
                          "--store", store_url)
    assert code == 2 and "neither a store run id" in err


def test_a_new_level_right_after_an_accept_pages_once_and_is_adopted_not_locked_out(capsys, tmp_path, store_url):
    """One trusted night of a new level is the history after an accept: the grad norm that keeps leaving the
    constraint's band (the prior while calibrating) is one level shift, not a page every night."""
    gates, rng = _trusted_start(
        capsys, tmp_path, store_url, "policy: calibrated\ngates:\n  - metric_key: train/grad_norm\n    enforce: true\n"
        "    constraint: {rel_up: 0.2, abs_floor_up: 0.0, rel_down: 0.2, abs_floor_down: 0.0}\n", 4, 8)
    code, verdict = _night(capsys, tmp_path, store_url, 8, rng, gates, grad_factor=2.0)  # a change doubles it
    assert code == 1
    code, out, err = _run(capsys, "accept", "--series", "rl", "--since", "night-008", "--reason", "new optimizer",
                          "--store", store_url)
    assert code == 0, err
    codes, outcomes, adopted = [], [], []
    for day in range(9, 9 + 9):  # the level moves on to 1.6x the accepted night: beyond its 20 % band on every step
        code, verdict = _night(capsys, tmp_path, store_url, day, rng, gates, grad_factor=3.2)
        codes.append(code)
        outcomes.append(verdict["declarations"][0]["outcome"])
        adopted += [(day, s["since_run_id"]) for s in verdict.get("level_shifts", []) if s.get("adopted")]
    assert codes == [1, 0, 0, 0, 0, 0, 0, 0, 0], (codes, outcomes)
    assert adopted == [(14, "night-009")]  # said once, on the night it is adopted
    assert outcomes == ["fail", "shift", "shift", "shift", "shift", "pass", "pass", "pass", "pass"], outcomes
    # the nights after the adoption are judged against the new level's nights only: 5, then 6, 7, 8
    assert verdict["declarations"][0]["nights"] == 8 and verdict["trusted"]
    report = replay(store_url, "rl", declarations=str(gates))  # the accept's marks and the adoption, replayed
    assert report["summary"]["newly_failing"] == report["summary"]["no_longer_failing"] == []
    assert len(report["nights"]) == 18


def _noisy_grad_record(path, rng, level):
    """A grad norm whose steps vary by a factor of about 2.2 from night to night (a policy gradient's)."""
    shared = rng.gauss(0.0, 0.25)
    grad = [[s, level * math.exp(shared + rng.gauss(0.0, 0.75))] for s in range(STEPS)]
    path.write_text(json.dumps({"metric": "train/grad_norm", "series": grad}) + "\n")
    return str(path)


def test_nights_right_after_an_accept_are_judged_with_the_spread_before_it(capsys, tmp_path, store_url):
    """After an accept the new level has one night; the nights before the accept, moved to it, calibrate the
    night test, where the constraint's band around that one night paged again on most of the next nights, and
    five to seven nights of the new level alone left a regression of three times inside a band of 11."""
    gates = tmp_path / "gates.yaml"
    gates.write_text("policy: calibrated\ngates:\n  - metric_key: train/grad_norm\n    enforce: true\n"
                     "    constraint: {rel_up: 1.0, abs_floor_up: 0.0, rel_down: 0.8, abs_floor_down: 0.0}\n")
    rng = random.Random(12)

    def night(day, level):
        record = _noisy_grad_record(tmp_path / f"grad{day}.jsonl", rng, level)
        code, out, err = _run(capsys, "run", record, "--gates", gates, "--series", "rl", "--store", store_url,
                              "--run-id", f"night-{day:03d}", "--logical-date", _date(day), "--json")
        assert code in (0, 1), err
        return code, json.loads(out)

    first = [night(day, 1.0)[1]["declarations"][0]["outcome"] for day in range(12)]
    assert first[-3:] == ["pass"] * 3  # calibrated (its cold start is the prior's, as before)
    trusted_before = sum(o in ("pass", "inactive") for o in first)
    code, verdict = night(12, 4.0)  # a new optimizer: the grad norm is four times higher from now on
    assert code == 1 and verdict["level_shifts"][0]["since_run_id"] == "night-012"
    code, out, err = _run(capsys, "accept", "--series", "rl", "--since", "night-012", "--reason", "new optimizer",
                          "--store", store_url)
    assert code == 0, err
    codes, bridges = [], []
    for day in range(13, 19):
        code, verdict = night(day, 4.0)
        codes.append(code)
        bridges.append(verdict["declarations"][0].get("bridge"))
    assert codes == [0] * 6, codes
    # the trusted nights before the accept fill the new level's history up (to the 20-night history limit)
    assert [(b["nights_since"], b["nights_before"]) for b in bridges] == [(k, trusted_before) for k in range(1, 7)]
    code, verdict = night(19, 4.0 * 12)  # a real regression after the accept
    assert code == 1 and verdict["declarations"][0]["outcome"] == "fail"
    # the bridge lasts while fewer than 20 nights (the history limit) were judged since the accept
    later = [night(day, 4.0)[1]["declarations"][0] for day in range(20, 33)]
    assert [d["outcome"] for d in later] == ["pass"] * 13
    assert later[-2]["bridge"]["nights_since"] == 18 and "bridge" not in later[-1]
    assert later[-1]["nights"] == 19
    report = replay(store_url, "rl", declarations=str(gates))
    assert report["summary"]["newly_failing"] == report["summary"]["no_longer_failing"] == []
    assert [n["replayed_status"] for n in report["nights"]][12:] == ["trusted"] * 7 + ["untrusted"] + ["trusted"] * 13


def test_replay_reproduces_evaluate_under_both_policies(capsys, tmp_path, store_url):
    gates = tmp_path / "gates.yaml"
    gates.write_text("gates:\n  - metric_key: rollout/raw_reward\n  - metric_key: train/grad_norm\n")
    rng = random.Random(4)
    stored = []
    for day in range(16):
        factor = 0.7 if day in (9, 13) else 1.0
        _, verdict = _night(capsys, tmp_path, store_url, day, rng, gates, "--policy", "calibrated",
                            reward_factor=factor, grad_factor=1.0 if day != 12 else 8.0)
        stored.append(("trusted" if verdict["trusted"] else "untrusted", verdict["counts"]))
    assert {s for s, _ in stored} == {"trusted", "untrusted"}
    report = replay(store_url, "rl", declarations=str(gates), policy="calibrated")
    assert [(n["replayed_status"], n["counts"]) for n in report["nights"]] == [
        (s, {k: v for k, v in c.items() if v}) for s, c in stored]
    assert report["summary"]["newly_failing"] == report["summary"]["no_longer_failing"] == []
    # the stored declarations say calibrated: replaying them without a gates file gives the same nights
    again = replay(store_url, "rl")
    assert [n["replayed_status"] for n in again["nights"]] == [s for s, _ in stored]
    # and the reference policy through the same command still replays as evaluate judged it
    with open_store(store_url) as store:
        assert len(store.list_runs(series="rl", limit=100)) == 16
    code, out, _ = _run(capsys, "replay", "--series", "rl", "--gates", gates, "--policy", "reference", "--json",
                        "--store", store_url)
    assert code == 0 and json.loads(out)["settings"].get("policy") in (None, "reference")
    code, out, err = _run(capsys, "replay", "--series", "rl", "--policy", "calibrated", "--store", store_url)
    assert code == 0, err
    assert "policy=calibrated: 1 of 16 night(s) would fail" in out, out  # the blow-up night, as text


def test_the_verdict_lists_calibrated_declarations_in_the_gates_file_order(capsys, tmp_path, store_url):
    order = [("train/grad_norm", "[7]"), ("rollout/raw_reward", "last"), ("train/grad_norm", "[3]"),
             ("rollout/raw_reward", "[1, 2]"), ("train/grad_norm", "last"), ("rollout/raw_reward", "[40]"),
             ("train/grad_norm", "[0, 9]")]
    gates = tmp_path / "gates.yaml"
    gates.write_text("policy: calibrated\ngates:\n" + "".join(
        f"  - metric_key: {metric}\n    steps: {steps}\n" for metric, steps in order))
    rng = random.Random(5)
    for day in range(2):
        _, verdict = _night(capsys, tmp_path, store_url, day, rng, gates)
    listed = [(d["metric_key"], d["steps_key"]) for d in verdict["declarations"]]
    assert listed == [(metric, json.dumps(yaml.safe_load(steps), separators=(",", ":"))) for metric, steps in order]


def test_a_blow_up_right_after_a_rebaseline_on_an_untrusted_night_fails(capsys, tmp_path, store_url):
    """A rebaseline on a night whose grad norm failed, and nobody marks it trusted: the grad norm's new
    level has no trusted night.  A blow-up the night after still fails (no blind spot), judged against
    the rebaseline's own night; a night at the new level is a cold start, not a failure."""
    gates, rng = _trusted_start(capsys, tmp_path, store_url, "policy: calibrated\ngates:\n  - metric_key: "
                                "rollout/raw_reward\n    enforce: true\n  - metric_key: train/grad_norm\n"
                                "    enforce: true\n", 11, 8)
    code, verdict = _night(capsys, tmp_path, store_url, 8, rng, gates, grad_factor=2.0)  # a new optimizer
    grad = next(d for d in verdict["declarations"] if d["metric_key"] == "train/grad_norm")
    assert code == 1 and grad["outcome"] == "fail", verdict["declarations"]
    code, out, err = _run(capsys, "rebaseline", "--run-id", "night-008", "--store", store_url)
    assert code == 0, err
    # the night after: the grad norm x20 (a blow-up), far beyond anything before the rebaseline or on its night
    code, verdict = _night(capsys, tmp_path, store_url, 9, rng, gates, grad_factor=20.0)
    grad = next(d for d in verdict["declarations"] if d["metric_key"] == "train/grad_norm")
    assert code == 1 and grad["outcome"] == "fail", verdict["declarations"]
    failed = [r for r in verdict["results"] if r["metric_key"] == "train/grad_norm" and r["status"] == "FAIL"]
    assert failed and failed[-1]["bound"] == "blowup" and "blow-up" in failed[-1]["reason"], failed[-1:]
    reward = next(d for d in verdict["declarations"] if d["metric_key"] == "rollout/raw_reward")
    assert reward["outcome"] == "pass", verdict["declarations"]  # its rebaseline night passed: it has history
    # a night at the grad norm's new level is not judged against the old one: a cold start, not a failure
    code, verdict = _night(capsys, tmp_path, store_url, 10, rng, gates, grad_factor=2.0)
    grad = next(d for d in verdict["declarations"] if d["metric_key"] == "train/grad_norm")
    assert code == 0 and grad["outcome"] == "inactive", verdict["declarations"]
    inactive = [r for r in verdict["results"] if r["metric_key"] == "train/grad_norm"]
    assert all("cold start" in r["reason"] for r in inactive), inactive[:1]
    # replay judges the nights after the rebaseline as evaluate did; the rebaseline's own night, judged
    # with its marker as it stands now, is the first night of a new baseline (evaluate judged it before)
    report = replay(store_url, "rl", declarations=str(gates), policy="calibrated")
    statuses = [n["replayed_status"] for n in report["nights"]]
    assert statuses == ["trusted"] * 9 + ["untrusted", "trusted"], statuses


def test_a_declarations_policy_wins_over_its_files_which_wins_over_the_callers(capsys, tmp_path, store_url):
    """The order of SPEC's policy key: the declaration's own, its gates file's, the caller's
    (``--policy``, ``run_gate(policy=)``), else ``reference``; a policy that is none is bad input."""
    mixed = tmp_path / "mixed.yaml"
    mixed.write_text("policy: calibrated\ngates:\n  - metric_key: rollout/raw_reward\n    policy: reference\n"
                     "  - metric_key: train/grad_norm\n")
    plain = tmp_path / "plain.yaml"
    plain.write_text("gates:\n  - metric_key: rollout/raw_reward\n  - metric_key: train/grad_norm\n")
    rng = random.Random(12)
    judged = {}
    for day, (gates, extra) in enumerate([(mixed, ("--policy", "reference")), (plain, ("--policy", "calibrated")),
                                          (plain, ())]):
        _, verdict = _night(capsys, tmp_path, store_url, day, rng, gates, *extra)
        judged[day] = (verdict.get("policy"), sorted(d["metric_key"] for d in verdict.get("declarations", ())))
    assert judged == {
        0: ("mixed", ["train/grad_norm"]),  # the file's calibrated beats --policy reference; the reward's own wins
        1: ("calibrated", ["rollout/raw_reward", "train/grad_norm"]),  # the file says nothing: --policy applies
        2: (None, []),  # nobody says: reference, and its verdict keeps the reference shape
    }
    bad = tmp_path / "bad.yaml"
    bad.write_text("gates:\n  - metric_key: train/grad_norm\n    policy: calibratd\n")
    record = _record(tmp_path / "bad.jsonl", rng)
    code, out, err = _run(capsys, "run", record, "--gates", bad, "--series", "rl", "--store", store_url,
                          "--run-id", "bad-policy", "--logical-date", _date(5))
    assert code == 2 and f"{bad}:2: gate 1 (train/grad_norm): field 'policy': must be one of 'reference', " \
        "'calibrated', got 'calibratd'" in err, err
    assert "nothing was stored" in err
    with open_store(store_url) as store:
        assert [r.run_id for r in store.list_runs(series="rl", limit=10) if r.run_id == "bad-policy"] == []


def test_run_gate_gives_its_policy_to_the_declarations_that_set_none(tmp_path, store_url):
    from airflow_metric_gate import run_gate

    rng = random.Random(13)
    gates = [{"metric_key": "rollout/raw_reward", "policy": "reference"}, {"metric_key": "train/grad_norm"}]
    verdict = run_gate(_record(tmp_path / "n.jsonl", rng), gates, series="rl", store=store_url, policy="calibrated",
                       logical_date=_date(0))
    as_json = verdict.to_dict()
    assert as_json["policy"] == "mixed"
    assert [d["metric_key"] for d in as_json["declarations"]] == ["train/grad_norm"]
    with pytest.raises(DeclarationError, match="policy must be one of 'reference', 'calibrated', got 'strict'"):
        run_gate(_record(tmp_path / "m.jsonl", rng), gates, series="rl", store=store_url, policy="strict",
                 logical_date=_date(1))


def test_a_starved_calibrated_declaration_names_its_own_cause(capsys, tmp_path, store_url):
    """Under calibrated, trust is per declaration: a starved declaration's nights were untrusted for a cause
    of its own, and its reason names that cause, not the first one another declaration had."""
    gates = tmp_path / "gates.yaml"
    gates.write_text("policy: calibrated\ngates:\n  - metric_key: eval/f1_scroe\n    steps: last\n"
                     "    constraint: {rel_up: 0.1, rel_down: 0.1}\n"
                     "  - metric_key: train/grad_norm\n")
    rng = random.Random(14)
    for day in range(4):  # the trainer does not log the grad norm yet; the misspelt f1 is never there
        record = tmp_path / f"night{day}.jsonl"
        record.write_text(json.dumps({"metric": "rollout/raw_reward", "series": [[s, 0.5] for s in range(STEPS)]})
                          + "\n")
        code, out, err = _run(capsys, "run", record, "--gates", gates, "--series", "rl", "--store", store_url,
                              "--run-id", f"night-{day:03d}", "--logical-date", _date(day))
        assert code == 0, err
    record = _record(tmp_path / "night4.jsonl", rng)
    code, out, err = _run(capsys, "run", record, "--gates", gates, "--series", "rl", "--store", store_url,
                          "--run-id", "night-004", "--logical-date", _date(4), "--json")
    verdict = json.loads(out)
    [starved] = [s for s in verdict["starved"] if s["metric_key"] == "train/grad_norm"]
    assert starved["reason"].startswith("starved baseline: no trusted night since 2026-01-01: every one of the 4 "
                                        "earlier night(s) was untrusted, the latest because train/grad_norm: ")
    assert "f1_scroe" not in starved["reason"], starved["reason"]
    # the text report (the task log) says it on a line of its own
    code, out, err = _run(capsys, "show", "night-004", "--store", store_url)
    assert code in (0, 1), err
    [line] = [x for x in out.splitlines() if x.startswith("STARVED train/grad_norm")]
    assert line == f"STARVED train/grad_norm (steps \"all\"): {starved['reason']}", line


def test_a_level_begun_by_a_blow_up_or_a_night_marked_untrusted_is_no_blow_up_reference(capsys, tmp_path, store_url):
    """The blow-up test of a declaration without history judges against its level's own nights: a
    rebaseline on a night that blew up (a legitimate 10x) begins the level the next nights are judged
    against, not the old one; the marker's night itself, judged again, has nothing to be judged
    against; and a night a person marked untrusted (garbage values) is nobody's reference."""
    grad = "policy: calibrated\ngates:\n  - metric_key: train/grad_norm\n    enforce: true\n"
    gates, rng = _trusted_start(capsys, tmp_path, store_url, grad, 15, 8)
    code, verdict = _night(capsys, tmp_path, store_url, 8, rng, gates, grad_factor=10.0)  # a new loss scale
    assert code == 1 and verdict["declarations"][0]["outcome"] == "fail"
    assert verdict["results"][-1]["bound"] == "blowup"
    code, _, err = _run(capsys, "rebaseline", "--run-id", "night-008", "--store", store_url)
    assert code == 0, err
    outcomes = []
    for day in range(9, 12):
        code, verdict = _night(capsys, tmp_path, store_url, day, rng, gates, grad_factor=10.0)
        outcomes.append((code, verdict["declarations"][0]["outcome"]))
    assert outcomes[0] == (0, "inactive") and all(code == 0 for code, _ in outcomes), outcomes
    # the marker's night, rebuilt with its marker in place: the first night of its level, nothing to fail
    code, out, err = _run(capsys, "show", "night-008", "--store", store_url, "--json")
    assert code == 0 and json.loads(out)["declarations"][0]["outcome"] == "inactive", out[-800:]

    # a new series: its first night's values are garbage, and a person says so
    first = _record(tmp_path / "garbage.jsonl", rng, grad_factor=10.0)
    code, out, err = _run(capsys, "run", first, "--gates", gates, "--series", "fresh", "--store", store_url,
                          "--run-id", "fresh-0", "--logical-date", _date(0), "--json")
    assert code == 0, err
    code, _, err = _run(capsys, "mark-untrusted", "--run-id", "fresh-0", "--reason", "bad logging", "--store",
                        store_url)
    assert code == 0, err
    for day in (1, 2):
        record = _record(tmp_path / f"fresh{day}.jsonl", rng)
        code, out, err = _run(capsys, "run", record, "--gates", gates, "--series", "fresh", "--store", store_url,
                              "--run-id", f"fresh-{day}", "--logical-date", _date(day), "--json")
        assert (code, json.loads(out)["declarations"][0]["outcome"]) == (0, "inactive"), out[-800:]  # calibrating

