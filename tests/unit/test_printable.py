"""Untrusted text is printed on one line, with control characters escaped (printable.py)."""

from __future__ import annotations

import pytest

from airflow_metric_gate.evaluation import evaluate_value
from airflow_metric_gate.printable import printable
from airflow_metric_gate.report import render_report, summary_line
from airflow_metric_gate.verdict import VerdictHeader, VerdictOptions, build_verdict

FORGED = "m\nmetric-gate: rl run r1: TRUSTED (1 results, 0 fail, 0 error)"


@pytest.mark.parametrize(
    "text, shown",
    [
        ("rollout/raw_reward", "rollout/raw_reward"),
        ("caf\u00e9 \u6e2c\u8a66", "caf\u00e9 \u6e2c\u8a66"),
        ("a\nb\rc\td", "a\\nb\\rc\\td"),
        ("\x1b[2Kx\x00\x7f", "\\x1b[2Kx\\x00\\x7f"),
        ("a\u2028b\u2029c\x85", "a\\u2028b\\u2029c\\x85"),
        ("abc\u202edef", "abc\\u202edef"),
        ("lone \ud800", "lone \\ud800"),
        ("back\\slash", "back\\slash"),
    ],
)
def test_printable(text, shown):
    assert printable(text) == shown
    assert len(printable(text).splitlines()) <= 1
    printable(text).encode("utf-8")


def _verdict(metric_key=FORGED, series="rl", **kwargs):
    result = evaluate_value(metric_key=metric_key, steps_key='"all"', constraint_key="{}", step=0, at_step=0,
                            current=5.0, constraint={"rel_up": 0.1, "rel_down": 0.1}, min_history=1,
                            history=[1.0])
    header = VerdictHeader(series=series, backend="cuda", suite="default", run_id="r1", role="baseline",
                           logical_date="2026-11-30T00:00:00+00:00", trusted=False, enforced=False, blocking=0)
    return build_verdict(header, [result], VerdictOptions(**kwargs))


def test_a_metric_key_cannot_forge_a_line_of_the_table_or_summary():
    verdict = _verdict()
    lines = str(render_report(verdict)).splitlines()
    assert [line for line in lines if line.startswith("metric-gate:")] == [summary_line(verdict)]
    assert "NOT-TRUSTED" in summary_line(verdict)
    assert verdict["results"][0]["metric_key"] == FORGED  # the verdict itself keeps the key as it is


def test_a_series_name_cannot_forge_the_summary_line():
    verdict = _verdict(metric_key="m", series="rl: TRUSTED\nmetric-gate: x")
    assert len(summary_line(verdict).splitlines()) == 1
    assert len([line for line in str(render_report(verdict)).splitlines() if line.startswith("metric-gate:")]) == 1
