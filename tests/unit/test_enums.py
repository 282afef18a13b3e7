"""The vocabularies are written once, and reach JSON and messages as the plain strings they always were."""

from __future__ import annotations

import json

from airflow_metric_gate import enums
from airflow_metric_gate.enums import AGGREGATES, RECORD_FORMATS, ROLES, RUN_STATUSES, STATUSES, Role, Status


def test_the_values_are_the_documented_strings():
    assert STATUSES == ("PASS", "FAIL", "INACTIVE", "ERROR")
    assert RUN_STATUSES == ("pending", "trusted", "untrusted")
    assert (ROLES, AGGREGATES, RECORD_FORMATS) == (
        ("baseline", "shadow"), ("mean", "median"), ("series", "rows", "tensorboard", "mlflow", "csv"))
    assert all(type(value) is str for value in (*STATUSES, *RUN_STATUSES, *ROLES, enums.PASS, enums.ERROR))


def test_a_member_prints_and_serializes_as_its_value():
    assert (str(Status.FAIL), f"{Role.SHADOW}", json.dumps({"s": Status.PASS})) == ("FAIL", "shadow", '{"s": "PASS"}')


def test_problem_names_the_setting_and_the_choices():
    assert Role.problem("baseline", "role") is None
    assert Role.problem("Baseline", "role") == "role must be one of baseline, shadow, got 'Baseline'"
    assert Status.problem(None, "status") == "status must be one of PASS, FAIL, INACTIVE, ERROR, got None"
