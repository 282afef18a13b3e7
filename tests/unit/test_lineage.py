"""One data-quality assertion per declaration, and the store's dataset names (no Airflow, no OpenLineage)."""

from __future__ import annotations

from airflow_metric_gate.lineage import declaration_assertions, store_dataset

DECLS = [{"metric_key": m, "steps_key": '"all"', "constraint_key": "{}"} for m in ("a", "b", "c")]


def _entry(metric, fail=0, error=0, **extra):
    return {"metric_key": metric, "steps_key": '"all"', "constraint_key": "{}",
            "counts": {"PASS": 1, "FAIL": fail, "INACTIVE": 0, "ERROR": error}, **extra}


def test_each_declaration_is_one_assertion_in_declaration_order():
    verdict = {"summary": [_entry("c", error=1), _entry("b", fail=2, severity="warn")]}
    found = declaration_assertions(verdict, DECLS)
    assert [(a.column, a.success, a.severity, a.actual) for a in found] == [
        ("a", True, "error", None), ("b", False, "warn", "2 FAIL, 0 ERROR"), ("c", False, "error", "0 FAIL, 1 ERROR")]
    assert found[0].assertion == "within_band" and found[0].name == 'a (steps "all")'


def test_a_declaration_only_the_verdict_names_is_still_asserted():
    (only,) = declaration_assertions({"summary": [_entry("z", fail=1)]}, [])
    assert (only.column, only.success) == ("z", False)


def test_dataset_names_follow_openlineage_naming_and_carry_no_login():
    assert store_dataset("postgres", database="gate", host="db.internal", port=6432) == (
        "postgres://db.internal:6432", "gate.public.metric_values")
    assert store_dataset("postgres", database="gate", host=None) == ("postgres://localhost:5432",
                                                                      "gate.public.metric_values")
    assert store_dataset("sqlite", database="/srv/gate.db") == ("sqlite:///srv/gate.db", "main.metric_values")
