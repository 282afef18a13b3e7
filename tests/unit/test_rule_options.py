"""The opt-in declaration options ``band``/``mad_k`` and ``severity``: validation, serialization, rendering."""

from __future__ import annotations

import pytest

from airflow_metric_gate.declarations import (
    DeclarationError,
    GateDeclaration,
    collapse_duplicates,
    declare,
    load_gates_file,
    resolve_declarations,
)
from airflow_metric_gate.evaluation import FAIL, Result
from airflow_metric_gate.schemas.verdict import VerdictSchema
from airflow_metric_gate.verdict import build_verdict, render_report

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
    return build_verdict(series="s", backend="b", suite="n", run_id="r", role="baseline", logical_date="2026-01-01",
                         results=[fail], trusted=False, enforced=True, blocking=0 if warn else 1,
                         warn_declarations=[key] if warn else ())


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
