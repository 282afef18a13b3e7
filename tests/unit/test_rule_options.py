"""The opt-in declaration options ``band``/``mad_k`` and ``severity``: validation, serialization, rendering."""

from __future__ import annotations

import random

import pytest

from airflow_metric_gate.declarations import (
    DeclarationError,
    GateDeclaration,
    collapse_duplicates,
    declare,
    load_gates_file,
    resolve_declarations,
)
from airflow_metric_gate.evaluation import (
    FAIL,
    INACTIVE,
    PASS,
    Result,
    constraint_params,
    evaluate_value,
    judge,
    median_and_mad,
)
from airflow_metric_gate.report import render_report
from airflow_metric_gate.rules import RULE_OPTIONS, declaration_summary, rule_options
from airflow_metric_gate.schemas.verdict import VerdictSchema
from airflow_metric_gate.verdict import VerdictHeader, VerdictOptions, build_verdict

C = {"rel_up": 0.1, "rel_down": 0.1}


def test_defaults_are_off_and_not_serialized():
    d = declare("loss", steps="all", constraint=C)
    assert (d.band, d.mad_k, d.severity) == ("rel", None, "fail")
    assert d.rule_options() == {}
    assert not {"band", "mad_k", "severity"} & set(d.to_dict())


def test_mad_band_gets_the_default_k_and_round_trips():
    d = declare("loss", steps="all", constraint=C, band="mad")
    assert d.mad_k == 6.0
    assert d.rule_options() == {"band": "mad", "mad_k": 6.0}
    e = declare("loss", steps="all", constraint=C, band="mad", mad_k=2.5, severity="warn", min_failing_steps=4)
    assert e.rule_options() == {"min_failing_steps": 4, "band": "mad", "mad_k": 2.5, "severity": "warn"}
    assert GateDeclaration.from_dict(e.to_dict()) == e
    assert e.coordinate == d.coordinate  # the options do not re-key the coordinate


@pytest.mark.parametrize("kwargs, field, message", [
    ({"band": "median"}, "band", "must be one of 'rel', 'mad', got 'median'"),
    ({"band": None}, "band", "must be one of 'rel', 'mad', got None"),
    ({"band": "mad", "mad_k": 0}, "mad_k", "must be a finite number > 0, got 0"),
    ({"band": "mad", "mad_k": -1.0}, "mad_k", "must be a finite number > 0, got -1.0"),
    ({"band": "mad", "mad_k": float("inf")}, "mad_k", "must be a finite number > 0, got inf"),
    ({"band": "mad", "mad_k": True}, "mad_k", "must be a finite number > 0, got True"),
    ({"band": "mad", "mad_k": "3"}, "mad_k", "must be a finite number > 0, got '3'"),
    ({"mad_k": 3.0}, "mad_k", "applies only with band: mad, got band 'rel'"),
    ({"severity": "warning"}, "severity", "must be one of 'fail', 'warn', got 'warning'"),
    ({"severity": None}, "severity", "must be one of 'fail', 'warn', got None"),
])
def test_bad_values_are_declaration_errors_naming_the_field(kwargs, field, message):
    with pytest.raises(DeclarationError) as info:
        resolve_declarations([{"metric_key": "loss", "steps": "all", "constraint": C, **kwargs}])
    assert info.value.field == field
    assert f"field '{field}': {message}" in str(info.value)


def test_gates_file_options(tmp_path):
    path = tmp_path / "gates.yaml"
    path.write_text("gates:\n  - metric_key: train/grad_norm\n    band: mad\n    mad_k: 4\n    severity: warn\n")
    (d,) = load_gates_file(path)
    assert (d.band, d.mad_k, d.severity) == ("mad", 4.0, "warn")
    path.write_text("gates:\n  - metric_key: train/grad_norm\n    mad_k: 4\n")
    with pytest.raises(DeclarationError, match="mad_k.*applies only with band: mad") as info:
        load_gates_file(path)
    assert info.value.line == 2


def test_a_coordinate_declared_twice_with_different_options_is_an_error():
    a = declare("loss", steps="all", constraint=C, source="a")
    b = declare("loss", steps="all", constraint=C, severity="warn", source="b")
    with pytest.raises(DeclarationError, match="different severity: 'fail' at a, 'warn' at b"):
        collapse_duplicates([a, b])
    kept, warnings = collapse_duplicates([b, declare("loss", steps="all", constraint=C, severity="warn")])
    assert kept == [b] and len(warnings) == 1


def _verdict(warn: bool) -> dict:
    key = ("loss", '"all"', '{"rel_up":0.1}')
    fail = Result(*key, step=3, at_step=3, status=FAIL, current=2.0, ref=1.0, n=5, lo=0.9, hi=1.1,
                  side="above", bound="rel", reason="2 is above hi 1.1")
    header = VerdictHeader(series="s", backend="b", suite="n", run_id="r", role="baseline",
                           logical_date="2026-01-01", trusted=False, enforced=True, blocking=0 if warn else 1)
    return build_verdict(header, [fail], VerdictOptions(warn_declarations=[key] if warn else ()))


def test_a_warn_declaration_is_reported_as_a_warning():
    verdict = _verdict(warn=True)
    assert verdict["summary"][0]["severity"] == "warn" and verdict["results"][0]["severity"] == "warn"
    assert VerdictSchema().load(verdict)["summary"][0]["severity"] == "warn"
    report = render_report(verdict)
    assert report.summary[0].startswith('WARNING loss (steps "all"): 1 of 1 step FAIL')
    assert "(warning: severity warn, never blocks)" in report.table
    assert "1 FAIL/ERROR result(s) of severity warn declarations: warnings, never blocking" in report.table
    assert "fails the gate" not in report.table


def test_a_fail_declaration_reads_as_before():
    verdict = _verdict(warn=False)
    assert "severity" not in verdict["summary"][0] and "severity" not in verdict["results"][0]
    report = render_report(verdict)
    assert report.summary[0].startswith("REGRESSED loss")
    assert "warning" not in report.table


# -- the mad band, by hand ---------------------------------------------------------------------------

#: median 1.0; |v - 1.0|: 0 .1 .1 .2 .2 0 .05 .05 0 0, MAD 0.05; mad_k 6: band [0.7, 1.3]
HISTORY = [1.0, 1.1, 0.9, 1.2, 0.8, 1.0, 1.05, 0.95, 1.0, 1.0]
WIDE = {"rel_up": 0.5, "rel_down": 0.5}


def _mad(current, history=HISTORY, k=6.0, constraint=WIDE, **kw):
    return evaluate_value(metric_key="m", steps_key='"all"', constraint_key="{}", step=3, at_step=3,
                          current=current, history=history, constraint=constraint, mad_k=k, **kw)


def test_median_and_mad_by_hand():
    assert median_and_mad(HISTORY) == (1.0, pytest.approx(0.05))
    assert median_and_mad([3.0, 1.0, 2.0]) == (2.0, 1.0)  # |v - 2|: 1, 1, 0


def test_the_mad_band_is_the_median_plus_or_minus_k_mads():
    inside = _mad(1.25)
    assert inside.status == PASS and inside.ref == 1.0
    assert (inside.lo, inside.hi) == (pytest.approx(0.7), pytest.approx(1.3))
    above = _mad(1.4)
    assert (above.status, above.side, above.bound) == (FAIL, "above", "mad")
    assert above.reason == "1.4 is above hi 1.3 (mad band: ref 1 + 6 x MAD 0.05 = 0.3; median of n=10); off by 0.1"
    below = _mad(0.6, k=2.0)  # band [0.9, 1.1]
    assert (below.status, below.side, below.lo) == (FAIL, "below", pytest.approx(0.9))
    assert below.reason.startswith("0.6 is below lo 0.9 (mad band: ref 1 - 2 x MAD 0.05 = 0.1; median of n=10)")
    # the same value against the constraint's band alone (mean 1.01, [0.505, 1.515]) passes
    assert _mad(1.4, k=None).status == PASS


def test_both_ends_of_the_mad_band_are_inclusive():
    history = [float(x) for x in range(11)]  # median 5; |v - 5| sorted 0 1 1 2 2 3 3 4 4 5 5, MAD 3
    assert _mad(8.0, history=history, k=1.0).status == PASS  # band [2, 8]
    assert _mad(2.0, history=history, k=1.0).status == PASS
    assert _mad(8.000001, history=history, k=1.0).status == FAIL
    assert _mad(1.999999, history=history, k=1.0).status == FAIL


def test_fewer_than_ten_values_or_no_spread_fall_back_to_the_constraint_band():
    nine = _mad(1.6, history=HISTORY[:9])  # mean 1.0, rel 0.5: [0.5, 1.5]
    assert (nine.status, nine.bound, nine.hi) == (FAIL, "rel", pytest.approx(1.5))
    assert nine.reason.endswith("; constraint band, not the mad band: 9 baseline value(s), 10 needed")
    assert _mad(1.4, history=HISTORY[:9]).status == PASS
    flat = _mad(1.2, history=[1.0] * 12, constraint={"rel_up": 0.1, "rel_down": 0.1})
    assert (flat.status, flat.bound) == (FAIL, "rel")
    assert flat.reason.endswith("; constraint band, not the mad band: the MAD is 0")
    assert _mad(1.05, history=[1.0] * 12, constraint={"rel_up": 0.1, "rel_down": 0.1}).status == PASS


def test_cold_start_comes_first_and_the_aggregate_does_not_change_the_mad_band():
    assert _mad(5.0, min_history=11).status == INACTIVE
    assert _mad(1.4, aggregate="mean").reason == _mad(1.4, aggregate="median").reason


def test_judge_and_describe_agree_on_random_mad_bands():
    rng = random.Random(5)
    seen = set()
    for _ in range(1000):
        history = [rng.choice([1.0, 2.0, rng.uniform(0, 3)]) for _ in range(rng.randint(0, 14))]
        current, k = rng.uniform(-1, 4), rng.choice([0.5, 2.0, 6.0])
        status, ref, error, mad = judge(current, history, constraint_params(WIDE), 1, "mean", k)
        result = _mad(current, history=history, k=k)
        assert (result.status, result.ref) == (status, ref)
        if mad is not None:
            assert len(history) >= 10 and mad > 0 and ref == median_and_mad(history)[0]
            assert (result.lo <= current <= result.hi) == (status == PASS)
            seen.add((status, result.bound))
    assert {(PASS, None), (FAIL, "mad")} <= seen


# One value other than the default for every opt-in option (a new option adds its line here).
NON_DEFAULT = {"min_failing_steps": 3, "band": "mad", "mad_k": 2.5, "night_mean_k": 4.0, "severity": "warn",
               "policy": "calibrated", "direction": "down"}


def test_one_list_of_options_drives_storage_serialization_and_the_duplicate_check():
    assert set(NON_DEFAULT) == set(RULE_OPTIONS)
    full = declare("loss", steps="all", constraint=C, **NON_DEFAULT)
    # the declaration, its stored summary and its serialized form give the same options, by one function
    assert full.rule_options() == rule_options(full) == rule_options(full.summary()) == NON_DEFAULT
    assert rule_options(full.to_dict()) == NON_DEFAULT
    assert declaration_summary(full.summary()) == declaration_summary(full) == full.summary()
    assert rule_options(declare("loss", steps="all", constraint=C).summary()) == {}
    for name, value in NON_DEFAULT.items():
        mad = {"band": "mad"} if name == "mad_k" else {}  # mad_k applies only with band: mad
        first = declare("loss", steps="all", constraint=C, source="a.yaml", **mad)
        second = declare("loss", steps="all", constraint=C, source="b.yaml", **{**mad, name: value})
        with pytest.raises(DeclarationError, match=f"declared twice with different {name}") as info:
            collapse_duplicates([first, second])
        assert info.value.field == name
