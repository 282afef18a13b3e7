"""``metric-gate``: the gate outside Airflow, for local trials, CI jobs and on-call (SPEC section 9).

Exit status: 0 trusted (or not trusted but not enforced); 1 enforced and not trusted; 2 bad input or
usage, nothing stored; 3 the store, or the object storage holding the record, is unavailable (retry
later); 4 an unexpected internal error (a bug: one line on standard error, the traceback only with ``--debug``).
Statuses 2 and 3 are the kinds' (:data:`airflow_metric_gate.errors.FATES`), which the operators read too.

The package, a module a job: :mod:`~airflow_metric_gate.cli.parser` (the commands and their options,
with the argument types of :mod:`~airflow_metric_gate.cli.options`), the commands
(:mod:`~airflow_metric_gate.cli.gate_commands`, :mod:`~airflow_metric_gate.cli.store_commands`),
:mod:`~airflow_metric_gate.cli.output` (standard output and the verdict table's options),
:mod:`~airflow_metric_gate.cli.exits` (the exit statuses and the mapping of errors to them) and
:mod:`~airflow_metric_gate.cli.main` (the entry point).
"""

from __future__ import annotations

from airflow_metric_gate.cli.exits import (
    EXIT_BAD_INPUT,
    EXIT_BLOCKED,
    EXIT_INTERNAL_ERROR,
    EXIT_OK,
    EXIT_STORE_UNAVAILABLE,
)

# _COMMANDS: the command table main() dispatches through.
from airflow_metric_gate.cli.main import _COMMANDS as _COMMANDS
from airflow_metric_gate.cli.main import main
from airflow_metric_gate.cli.options import UsageError
from airflow_metric_gate.cli.parser import build_parser

# Read by the judging commands when they run (airflow_metric_gate.cli.gate_commands).
from airflow_metric_gate.declarations import load_gates_file
from airflow_metric_gate.report import render_report

__all__ = [
    "EXIT_BAD_INPUT",
    "EXIT_BLOCKED",
    "EXIT_INTERNAL_ERROR",
    "EXIT_OK",
    "EXIT_STORE_UNAVAILABLE",
    "UsageError",
    "build_parser",
    "load_gates_file",
    "main",
    "render_report",
]
