"""Exit statuses and the one place that maps a command's error to its status and its lines on standard error.

A package error's status is its kind's (:func:`airflow_metric_gate.errors.error_fate`, which the
operators read too); anything else is a bug (status 4).
"""

from __future__ import annotations

import argparse
import sys
import traceback
from collections.abc import Sequence

from airflow_metric_gate.enums import ErrorKind
from airflow_metric_gate.errors import FATES, error_fate
from airflow_metric_gate.printable import printable
from airflow_metric_gate.storage import StorageUnavailable
from airflow_metric_gate.store import StoreError, StoreInputError, StoreUnavailable

EXIT_OK = 0
EXIT_BLOCKED = 1
EXIT_BAD_INPUT = FATES[ErrorKind.BAD_INPUT].exit_status
EXIT_STORE_UNAVAILABLE = FATES[ErrorKind.UNAVAILABLE].exit_status
EXIT_INTERNAL_ERROR = 4

#: The commands that write to the store (or, for demo, a working folder): only their errors say
#: that nothing was stored.
_WRITING_COMMANDS = frozenset({"run", "mark-untrusted", "mark-trusted", "rebaseline", "accept", "db", "prune",
                               "demo"})


def _writes(argv: Sequence[str]) -> bool:
    """Whether the command line names a command that writes (its first word that is no option)."""
    return next((a for a in argv if not a.startswith("-")), None) in _WRITING_COMMANDS


def _command_name(args: argparse.Namespace) -> str:
    return " ".join(["metric-gate", args.command, *([args.db_command] if args.command == "db" else [])])


def _error(text: str) -> None:
    print(f"metric-gate: {printable(text)}", file=sys.stderr)


def _stored_note(args: argparse.Namespace) -> str:
    return (
        f"run {args.stored_run} was stored and is still pending; running the same command again with "
        f"--run-id {args.stored_run} replaces it"
    )


def _internal_error(args: argparse.Namespace, exc: BaseException) -> int:
    if args.debug:
        traceback.print_exception(type(exc), exc, exc.__traceback__, file=sys.stderr)
    stored = f"; {_stored_note(args)}" if args.stored_run else ""
    hint = "" if args.debug else "; run again with --debug for the traceback"
    print(
        printable(f"{_command_name(args)}: unexpected internal error (a bug in metric-gate, please report it): "
                  f"{type(exc).__name__}: {exc}{stored}{hint}"),
        file=sys.stderr,
    )
    return EXIT_INTERNAL_ERROR


def _failed(args: argparse.Namespace, exc: Exception) -> int:
    """Report the error a command raised; return the exit status of its kind (4 when it is not the package's).

    Bad input is found before anything is written; once a run was stored, a refusal of the store is
    reported as a store error (the run can be replaced) and any other bad input is a bug.

    :param args: the parsed command line.
    :param exc: the error.
    """
    fate = error_fate(exc)
    if fate is None:
        return _internal_error(args, exc)
    if fate.kind is ErrorKind.BAD_INPUT:
        if not args.stored_run:
            return _bad_input(args, exc)
        if not isinstance(exc, StoreInputError):
            return _internal_error(args, exc)
        fate = FATES[ErrorKind.UNAVAILABLE]
    _error(f"{_unavailable_label(exc)}: {exc}")
    if args.stored_run:
        _error(_stored_note(args))
    return fate.exit_status


#: How an unavailable (or store) error is labelled on standard error: the most specific class first.
_LABELS = (
    (StorageUnavailable, "storage unavailable (retry later)"),
    (StoreUnavailable, "store unavailable (retry later)"),
    (StoreError, "store error"),
)


def _unavailable_label(exc: Exception) -> str:
    return next((label for cls, label in _LABELS if isinstance(exc, cls)), "unavailable (retry later)")


def _bad_input(args: argparse.Namespace, exc: BaseException) -> int:
    _error(f"error: {exc}")
    if args.command in _WRITING_COMMANDS:
        _error("nothing was stored")
    return EXIT_BAD_INPUT


