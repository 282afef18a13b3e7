"""``metric-gate``'s entry point: parse the command line, run the command, map what it raised to an exit status."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence

from airflow_metric_gate.cli import gate_commands, store_commands
from airflow_metric_gate.cli.exits import EXIT_BAD_INPUT, EXIT_OK, _error, _failed, _writes
from airflow_metric_gate.cli.output import _silence_stdout
from airflow_metric_gate.cli.parser import build_parser

_COMMANDS: dict[str, Callable[[argparse.Namespace], int]] = {
    "run": gate_commands._cmd_run,
    "check": gate_commands._cmd_check,
    "history": store_commands._cmd_history,
    "mark-untrusted": store_commands._cmd_mark,
    "mark-trusted": store_commands._cmd_mark,
    "runs": store_commands._cmd_runs,
    "show": gate_commands._cmd_show,
    "rebaseline": store_commands._cmd_rebaseline,
    "accept": store_commands._cmd_accept,
    "replay": gate_commands._cmd_replay,
    "db": store_commands._cmd_db,
    "prune": store_commands._cmd_prune,
    "demo": store_commands._cmd_demo,
}


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``metric-gate`` and return its exit status.

    Bad input exits 2 and nothing is stored (the commands that write say so); a store outage exits 3;
    anything unexpected exits 4 with one line on standard error (and the traceback with ``--debug``).
    Once a run was stored, no message says that nothing was.

    :param argv: arguments (default: ``sys.argv[1:]``).
    """
    parser = build_parser()
    argv = sys.argv[1:] if argv is None else list(argv)
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # argparse exits 2 on usage errors, 0 on --help
        if exc.code == EXIT_BAD_INPUT and _writes(argv):
            _error("nothing was stored")
        return int(exc.code or 0)
    args.stored_run = None
    try:
        return _COMMANDS[args.command](args)
    except BrokenPipeError:  # the reader of standard output went away after the command's work was done
        _silence_stdout()
        return EXIT_OK
    except Exception as exc:
        return _failed(args, exc)


