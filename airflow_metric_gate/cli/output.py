"""How ``metric-gate`` prints: standard output that tolerates a reader going away, and the verdict table's options."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable, Sequence

from airflow_metric_gate.printable import printable
from airflow_metric_gate.records import MARKER_SKIP
from airflow_metric_gate.report import DEFAULT_TABLE_ROWS, show_command


def _emit(text: str) -> None:
    """Print to standard output; a reader that went away (``| head``) is no error."""
    try:
        print(text)
        sys.stdout.flush()
    except BrokenPipeError:
        _silence_stdout()


def _silence_stdout() -> None:
    """Point standard output at the null device, so that nothing fails again when Python exits."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError):  # stdout has no file descriptor (captured, replaced)
        pass


def _table_rows(args: argparse.Namespace) -> int | None:
    if args.table_rows is not None:
        return args.table_rows or None
    return None if args.all else DEFAULT_TABLE_ROWS



def _where(verdict: dict, args: argparse.Namespace) -> tuple[str, ...]:
    if not verdict["summary"] and not verdict["truncated"]:
        return ()
    if args.all and not verdict["truncated"] and _table_rows(args) is None:
        return ()  # everything is on the screen already
    return (f"Every result: {show_command(verdict)} (same --store); the verdict as JSON: add --json",)


def _skipped_reporter(verbose: bool) -> Callable[[Sequence[tuple[str, str]]], None]:
    """Print the record directory entries that were not read; a completion marker only when ``verbose``."""

    def report(skipped: Sequence[tuple[str, str]]) -> None:
        for path, reason in skipped:
            if verbose or reason != MARKER_SKIP:
                print(f"metric-gate: record: skipped {printable(path)} ({reason})", file=sys.stderr)

    return report


