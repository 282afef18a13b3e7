"""The argument types and shared options of ``metric-gate``'s parser: plain refusals, never argparse's own wording."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from datetime import datetime, timezone

from airflow_metric_gate.dates import parse_datetime, utc
from airflow_metric_gate.decision import POLICIES
from airflow_metric_gate.errors import BadInputError
from airflow_metric_gate.limits import MAX_HISTORY_LIMIT, MAX_STEP, logical_date_problem
from airflow_metric_gate.report import DEFAULT_TABLE_ROWS
from airflow_metric_gate.store import STORE_URL_ENV


class UsageError(BadInputError):
    """A command-line argument is invalid."""


def _logical_date(text: str | None) -> datetime:
    if text is None:
        return datetime.now(timezone.utc)
    try:
        value = parse_datetime(text, "--logical-date")
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    problem = logical_date_problem(value)
    if problem:
        raise UsageError(f"--logical-date: {problem}")
    return utc(value)


def _int_in(low: int, high: int | None, expected: str) -> Callable[[str], int]:
    """Return an argparse type: an integer from ``low`` to ``high`` (no upper end when ``None``).

    Every refusal is a plain message (``not an integer: 'x'``, ``must be ...``), never argparse's
    "invalid <function name> value".

    :param low: the smallest value.
    :param high: the largest value, if any.
    :param expected: what the message says the value must be.
    """

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"not an integer: {text!r}") from None
        if value < low or (high is not None and value > high):
            raise argparse.ArgumentTypeError(f"must be {expected}, got {value}")
        return value

    parse.__name__ = "integer"  # what argparse would name it in a message of its own
    return parse


_positive = _int_in(1, MAX_STEP, f"from 1 to {MAX_STEP}")
_stored_step = _int_in(-1, MAX_STEP, f'-1 (steps "last") or from 0 to {MAX_STEP}')
_history_limit = _int_in(1, MAX_HISTORY_LIMIT, f"from 1 to {MAX_HISTORY_LIMIT}")
_nonnegative = _int_in(0, MAX_STEP, f"from 0 to {MAX_STEP}")
_non_negative = _int_in(0, None, ">= 0")


def _table_rows_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--table-rows", type=_non_negative, metavar="N",
        help=f"at most N table rows per declaration, worst first; 0: no limit "
        f"(default: {DEFAULT_TABLE_ROWS}, no limit with --all)",
    )


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number of seconds: {text!r}") from None
    if not 0 <= value < float("inf"):
        raise argparse.ArgumentTypeError(f"must be a finite number of seconds >= 0, got {text!r}")
    return value


def _store_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--store",
        metavar="URL",
        help=f"store URL: sqlite:///PATH or postgresql://USER@HOST:PORT/DB "
        f"(default: ${STORE_URL_ENV}, else sqlite:///metric_gate.db)",
    )


class _HelpFormatter(argparse.HelpFormatter):
    """Say each option's default in its help line, unless the help already says it."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        text = action.help or ""
        if action.default not in (None, False, argparse.SUPPRESS) and "default" not in text:
            text += " (default: %(default)s)"
        return text


def _command(sub: argparse._SubParsersAction, name: str, summary: str, details: str = "") -> argparse.ArgumentParser:
    """Add subcommand ``name``: ``summary`` in the command list, and as its ``--help`` description with ``details``."""
    description = summary[0].upper() + summary[1:] + "." + (" " + details if details else "")
    return sub.add_parser(name, help=summary, description=description, formatter_class=_HelpFormatter)




def _policy_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--policy", choices=POLICIES, default=None,
                        help="decision policy for declarations that set none (nor their gates file): reference "
                        "(the default; SPEC behaviour) or calibrated (recommended; see docs/concepts.md)")


