"""``metric-gate``: the gate outside Airflow, for local trials, CI jobs and on-call (SPEC section 9).

Exit status: 0 trusted (or not trusted but not enforced); 1 enforced and not trusted; 2 bad input or
usage, nothing stored; 3 the store, or the object storage holding the record, is unavailable (retry
later); 4 an unexpected internal error (a bug: one line on standard error, the traceback only with ``--debug``).
Statuses 2 and 3 are the kinds' (:data:`airflow_metric_gate.errors.FATES`), which the operators read too.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
import traceback
from collections.abc import Callable, Sequence
from datetime import datetime, timezone

from airflow_metric_gate import __version__
from airflow_metric_gate.accept import current_user
from airflow_metric_gate.dates import parse_datetime, utc
from airflow_metric_gate.decision import POLICIES
from airflow_metric_gate.declarations import DeclarationError, collapse_duplicates, load_gates_file, with_policy
from airflow_metric_gate.enums import AGGREGATES, RECORD_FORMATS, ROLES, ErrorKind, RecordFormat
from airflow_metric_gate.errors import FATES, BadInputError, LocatedError, error_fate
from airflow_metric_gate.evaluation import DEFAULT_HISTORY_LIMIT, DEFAULT_MIN_HISTORY
from airflow_metric_gate.limits import (
    MAX_HISTORY_LIMIT,
    MAX_NAME_BYTES,
    MAX_STEP,
    key_problem,
    logical_date_problem,
)
from airflow_metric_gate.pipeline import (
    EarlierRunsPending,
    RunInfo,
    SeriesIdentity,
    candidate_limit,
    ingest,
    new_run_id,
    run_gate,
)
from airflow_metric_gate.printable import printable
from airflow_metric_gate.records import MARKER_SKIP, Record
from airflow_metric_gate.report import (
    DEFAULT_TABLE_ROWS,
    format_columns,
    render_report,
    show_command,
    warning_lines,
)
from airflow_metric_gate.storage import StorageUnavailable, is_uri, record_path, storage_errors
from airflow_metric_gate.store import STORE_URL_ENV, StoreError, StoreInputError, StoreUnavailable, open_store
from airflow_metric_gate.verdict import DEFAULT_MAX_RESULTS

EXIT_OK = 0
EXIT_BLOCKED = 1
EXIT_BAD_INPUT = FATES[ErrorKind.BAD_INPUT].exit_status
EXIT_STORE_UNAVAILABLE = FATES[ErrorKind.UNAVAILABLE].exit_status
EXIT_INTERNAL_ERROR = 4


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


def _table_rows(args: argparse.Namespace) -> int | None:
    if args.table_rows is not None:
        return args.table_rows or None
    return None if args.all else DEFAULT_TABLE_ROWS


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


def build_parser() -> argparse.ArgumentParser:
    """Return the ``metric-gate`` argument parser."""
    parser = argparse.ArgumentParser(
        prog="metric-gate",
        description="Gate nightly training metrics against the history of each coordinate.",
        formatter_class=_HelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    parser.add_argument("--debug", action="store_true",
                        help="on an unexpected internal error, print the traceback too")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    run = _command(sub, "run", "ingest a record, select, store and evaluate it",
                   "Exit status: 0 trusted, or not trusted but not enforced; 1 enforced and not trusted; 2 bad "
                   "input or usage (nothing stored); 3 the store or the object storage is unavailable (retry).")
    run.add_argument("record", metavar="RECORD",
                     help="record file or directory (JSON Lines): a local path or an object-storage URI "
                     "(s3://[CONN_ID@]bucket/key, gs://..., file://...)")
    run.add_argument("--storage-conn-id", metavar="CONN_ID",
                     help="Airflow connection of the object storage holding RECORD (same as CONN_ID@ in the URI)")
    run.add_argument("--gates", required=True, metavar="FILE", help="gates file: .yaml/.yml, .json or .py")
    run.add_argument("--series", default="default", help="training job whose nights are comparable")
    run.add_argument("--backend", default="cuda", help="hardware backend (default: cuda)")
    run.add_argument("--suite", default="default", help="schedule or cluster (default: default)")
    _store_option(run)
    run.add_argument("--role", choices=ROLES, default="baseline",
                     help="baseline runs feed future baselines; shadow runs are stored for audit only")
    run.add_argument("--run-id", help="idempotency key: the same id replaces that run (default: a fresh id)")
    run.add_argument("--logical-date", help="ISO 8601; orders history (default: now, UTC)")
    run.add_argument("--history-limit", type=_history_limit, default=DEFAULT_HISTORY_LIMIT,
                     help=f"baseline runs to compare with, 1 to {MAX_HISTORY_LIMIT} (default: {DEFAULT_HISTORY_LIMIT})")
    run.add_argument("--min-history", type=_non_negative, default=DEFAULT_MIN_HISTORY,
                     help=f"baseline values needed before a coordinate is judged (default: {DEFAULT_MIN_HISTORY})")
    run.add_argument("--aggregate", choices=AGGREGATES, default="mean", help="baseline reference (default: mean)")
    run.add_argument("--format", choices=RECORD_FORMATS, default="series", help="record format")
    _policy_option(run)
    run.add_argument("--enforce", action="store_true", help="exit 1 when a FAIL or ERROR makes the run untrusted")
    run.add_argument("--json", action="store_true", help="print only the verdict JSON on stdout")
    run.add_argument("--all", action="store_true", help="list every result, not only FAIL and ERROR")
    run.add_argument("--max-results", type=_non_negative, default=DEFAULT_MAX_RESULTS,
                     help=f"at most this many results in the verdict (default: {DEFAULT_MAX_RESULTS})")
    _table_rows_option(run)
    run.add_argument("--wait", type=_seconds, default=0.0, metavar="SECONDS",
                     help="wait up to SECONDS for earlier nights of the series that are stored but not judged "
                     "yet (a backfill); default: do not wait, exit 3 naming them")
    run.add_argument("--commit", help="commit sha kept as provenance (mark-untrusted --commit finds it)")
    run.add_argument("--training-job-id", help="training job id kept as provenance")
    run.add_argument("-v", "--verbose", action="store_true",
                     help="also say which completion markers (_SUCCESS, names starting with '_') of a record "
                     "directory were not read; other skipped entries are always named")

    check = _command(sub, "check", "check gates files as a night would read them (for CI); stores nothing")
    check.add_argument("gates", nargs="+", metavar="GATES",
                       help="gates file(s): .yaml/.yml, .json or .py with register_ci_gate calls")
    check.add_argument("--json", action="store_true", help="print each file's declarations as JSON")

    history = _command(sub, "history", "show the stored values of a metric")
    history.add_argument("metric_key", metavar="METRIC_KEY", help="the metric, as declared (e.g. train/grad_norm)")
    history.add_argument("--series", required=True, help="training job whose nights are shown")
    history.add_argument("--backend", help="only this hardware backend (default: every backend)")
    history.add_argument("--suite", help="only this schedule or cluster (default: every suite)")
    history.add_argument("--step", type=_stored_step, help="stored step (-1 for steps \"last\")")
    history.add_argument("--limit", type=_positive, default=50, help="at most this many rows (default: 50)")
    _store_option(history)
    history.add_argument("--json", action="store_true", help="print rows as JSON")

    for name, status in (("mark-untrusted", "untrusted"), ("mark-trusted", "trusted")):
        mark = _command(sub, name, f"mark runs {status} (idempotent; prints every run it matched)",
                        "Name the runs by one of --run-id, --airflow-run-id or --commit; the other options narrow "
                        "the match.")
        which = mark.add_mutually_exclusive_group(required=True)
        which.add_argument("--run-id", help="store run id")
        which.add_argument("--airflow-run-id", help="Airflow DAG run id (needs --dag-id)")
        which.add_argument("--commit", help="commit sha")
        mark.add_argument("--dag-id", help="only runs of this Airflow DAG (required with --airflow-run-id)")
        mark.add_argument("--series", help="only runs of this series")
        mark.add_argument("--backend", help="only runs of this backend")
        mark.add_argument("--suite", help="only runs of this suite")
        mark.add_argument("--reason", help="note kept in runs.status_reason (recorded even when the status "
                                           "does not change)")
        _store_option(mark)
        mark.set_defaults(status=status)

    runs = _command(sub, "runs", "list stored runs with their role and status, newest first")
    runs.add_argument("--series", help="only this series")
    runs.add_argument("--backend", help="only this backend")
    runs.add_argument("--suite", help="only this suite")
    runs.add_argument("--limit", type=_positive, default=20, help="at most this many runs (default: 20)")
    _store_option(runs)
    runs.add_argument("--json", action="store_true", help="print runs as JSON")

    show = _command(sub, "show", "rebuild a stored run's verdict against the store as it is now")
    show.add_argument("run_id", metavar="RUN_ID", help="store run id (see metric-gate runs)")
    show.add_argument("--history-limit", type=_history_limit, default=DEFAULT_HISTORY_LIMIT,
                      help=f"baseline runs to compare with, 1 to {MAX_HISTORY_LIMIT}")
    show.add_argument("--min-history", type=_non_negative, default=DEFAULT_MIN_HISTORY,
                      help="baseline values needed before a coordinate is judged")
    show.add_argument("--aggregate", choices=AGGREGATES, default="mean", help="baseline reference")
    show.add_argument("--all", action="store_true", help="list every result, not only FAIL and ERROR")
    show.add_argument("--json", action="store_true", help="print only the verdict JSON on stdout")
    show.add_argument("--max-results", type=_non_negative, default=DEFAULT_MAX_RESULTS,
                      help=f"at most this many results in the verdict (default: {DEFAULT_MAX_RESULTS})")
    _table_rows_option(show)
    _store_option(show)

    replay = _command(sub, "replay", "re-judge the stored nights of a series with other gates or settings "
                                            "(writes nothing)")
    replay.add_argument("--series", required=True, help="training job whose nights are replayed")
    replay.add_argument("--backend", default="cuda", help="hardware backend (default: cuda)")
    replay.add_argument("--suite", default="default", help="schedule or cluster (default: default)")
    replay.add_argument("--gates", metavar="FILE",
                        help="judge with these declarations (default: the ones stored with each night)")
    replay.add_argument("--history-limit", type=_history_limit, default=DEFAULT_HISTORY_LIMIT,
                        help=f"baseline runs to compare with, 1 to {MAX_HISTORY_LIMIT} "
                        f"(default: {DEFAULT_HISTORY_LIMIT})")
    replay.add_argument("--min-history", type=_non_negative, default=DEFAULT_MIN_HISTORY,
                        help=f"baseline values needed before a coordinate is judged (default: {DEFAULT_MIN_HISTORY})")
    replay.add_argument("--aggregate", choices=AGGREGATES, default="mean", help="baseline reference (default: mean)")
    _policy_option(replay)
    replay.add_argument("--trust", choices=("replayed", "stored"), default="replayed",
                        help="which trust decides that a night feeds later baselines (default: replayed)")
    replay.add_argument("--json", action="store_true", help="print the replay report as JSON")
    _store_option(replay)

    accept = _command(
        sub, "accept", "accept a level shift: its nights become the new baseline (rebaseline from the first, mark "
        "them trusted)",
        "A rebaseline marker is set on the first baseline night at or after --since, and every baseline night "
        "from then on is marked trusted with the reason, so later nights are judged against those nights (their "
        "history, not one night). Idempotent.")
    accept.add_argument("--series", required=True, help="training job whose level changed")
    accept.add_argument("--backend", default="cuda", help="hardware backend (default: cuda)")
    accept.add_argument("--suite", default="default", help="schedule or cluster (default: default)")
    accept.add_argument("--since", required=True, metavar="NIGHT",
                        help="the first night of the new level: a logical date (ISO 8601) or a store run id "
                        "(the verdict's level shift names it)")
    accept.add_argument("--reason", required=True, help="why the new level is right (kept with each night)")
    _store_option(accept)

    rebase = _command(sub, "rebaseline", "start a fresh baseline at a run: later runs ignore older history")
    rebase.add_argument("--run-id", required=True, help="store run id")
    rebase.add_argument("--undo", action="store_true", help="remove the marker")
    _store_option(rebase)

    prune = _command(sub, "prune", "remove old nights, keeping every night a current baseline uses")
    prune.add_argument("--keep", type=_nonnegative, metavar="N",
                       help="keep the N most recent nights of each series identity")
    prune.add_argument("--before", metavar="DATE", help="remove only nights with a logical date before DATE (ISO 8601)")
    prune.add_argument("--series", help="only this series")
    prune.add_argument("--backend", help="only this backend")
    prune.add_argument("--suite", help="only this suite")
    prune.add_argument("--history-limit", type=_history_limit, default=DEFAULT_HISTORY_LIMIT,
                       help="the history limit the gates use (decides which nights a current baseline uses)")
    prune.add_argument("--force", action="store_true",
                       help="also remove matching nights that a current baseline uses")
    prune.add_argument("--dry-run", action="store_true", help="say what would be removed; remove nothing")
    prune.add_argument("--json", action="store_true", help="print the result as JSON")
    _store_option(prune)

    db = _command(sub, "db", "store schema", "metric-gate db upgrade creates or upgrades it.")
    db_sub = db.add_subparsers(dest="db_command", required=True, metavar="ACTION")
    upgrade = _command(db_sub, "upgrade", "create or upgrade the store schema")
    _store_option(upgrade)

    demo = _command(sub, "demo", "end-to-end demo on the embedded store")
    demo.add_argument("--workdir", help="where to keep the demo's files (default: a new temporary folder)")
    demo.add_argument("--nights", type=_positive, default=5, help="clean nights before the regressed one")
    demo.add_argument("--fresh", action="store_true",
                      help="start over in --workdir: delete what an earlier demo wrote there (store, Airflow home, "
                      "records, logs); without it, a --workdir holding an earlier demo's store is refused")
    return parser


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


def _check_names(args: argparse.Namespace) -> None:
    for option, value in (("--series", args.series), ("--backend", args.backend), ("--suite", args.suite),
                          ("--run-id", args.run_id), ("--commit", args.commit),
                          ("--training-job-id", args.training_job_id)):
        problem = None if value is None else key_problem(value, MAX_NAME_BYTES)
        if problem:
            raise UsageError(f"{option} {value!r} {problem}")


def _read_record(args: argparse.Namespace) -> Record:
    """Read the record: a local path, or a URI through the storage's connection or own configuration.

    Airflow (imported for a URI) logs to stdout; its lines go to stderr so that stdout keeps
    only the verdict.
    """
    if args.format == RecordFormat.MLFLOW:  # RECORD names the run (runs:/<id>, experiments:/<name>?tag.k=v)
        with contextlib.redirect_stdout(sys.stderr):
            return ingest(args.record, format=args.format)
    with contextlib.redirect_stdout(sys.stderr), storage_errors(args.record):
        location = record_path(args.record, conn_id=args.storage_conn_id) if is_uri(args.record) else args.record
        return ingest(location, format=args.format)


def _policy_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--policy", choices=POLICIES, default=None,
                        help="decision policy for declarations that set none (nor their gates file): reference "
                        "(the default; SPEC behaviour) or calibrated (recommended; see docs/concepts.md)")


def _cmd_run(args: argparse.Namespace) -> int:
    _check_names(args)
    declarations, warnings = collapse_duplicates(with_policy(load_gates_file(args.gates), args.policy))
    for warning in warnings:
        print(printable(f"metric-gate: warning: {warning}"), file=sys.stderr)
    record = _read_record(args)
    logical_date = _logical_date(args.logical_date)
    provenance = {k: v for k, v in (("commit_sha", args.commit), ("training_job_id", args.training_job_id)) if v}
    provenance["source"] = "cli"
    run = RunInfo(run_id=args.run_id or new_run_id(), role=args.role, logical_date=logical_date,
                  provenance=provenance)
    identity = SeriesIdentity(args.series, args.backend, args.suite)
    with open_store(args.store) as store:
        try:
            verdict = run_gate(
                store, record=record, declarations=declarations, identity=identity, run=run,
                format=args.format, history_limit=args.history_limit, min_history=args.min_history,
                aggregate=args.aggregate, enforce=args.enforce, all_results=args.all, max_results=args.max_results,
                wait=args.wait, on_skipped=_skipped_reporter(args.verbose),
                on_stored=lambda run_id: setattr(args, "stored_run", run_id),
            )
        except EarlierRunsPending as exc:
            print(printable(f"metric-gate: not judged yet: {exc}"), file=sys.stderr)
            print(
                printable(
                    f"metric-gate: this night's values are stored as pending; run the same command again with "
                    f"--run-id {run.run_id} once those nights are judged (or add --wait SECONDS to wait for them). "
                    "A night that will never be judged can be marked: metric-gate mark-untrusted --run-id <id>"
                ),
                file=sys.stderr,
            )
            return EXIT_STORE_UNAVAILABLE
    if args.json:
        for line in warning_lines(verdict):  # stdout holds only the verdict: its warnings go to stderr too
            print(f"metric-gate: {line}", file=sys.stderr)
        _emit(json.dumps(verdict, indent=2))
    else:
        _emit(str(render_report(verdict, table_rows=_table_rows(args), where=_where(verdict, args))))
    return EXIT_BLOCKED if verdict["blocking"] else EXIT_OK


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


def _cmd_check(args: argparse.Namespace) -> int:
    """Read every gates file as ``run`` and ``SelectStepsOperator`` do: exit 2 when any is invalid."""
    bad = 0
    report: dict[str, object] = {}
    for path in args.gates:
        try:
            declarations, warnings = collapse_duplicates(load_gates_file(path))
        except (DeclarationError, LocatedError) as exc:
            bad += 1
            _error(f"error: {exc}")
            report[path] = {"valid": False, "error": str(exc)}
            continue
        for warning in warnings:
            print(printable(f"metric-gate: warning: {warning}"), file=sys.stderr)
        report[path] = {"valid": True, "declarations": [d.to_dict() for d in declarations], "warnings": warnings}
        if not args.json:
            print(printable(f"{path}: {len(declarations)} gate declaration(s), valid"))
    if args.json:
        print(json.dumps(report, indent=2))
    if bad:
        _error(f"{bad} of {len(args.gates)} gates file(s) invalid")
        return EXIT_BAD_INPUT
    return EXIT_OK


def _cmd_history(args: argparse.Namespace) -> int:
    with open_store(args.store, read_only=True) as store:
        rows = store.history(args.metric_key, series=args.series, backend=args.backend, suite=args.suite,
                             step=args.step, limit=args.limit)
    if args.json:
        print(json.dumps(rows, indent=2))
        return EXIT_OK
    if not rows:
        print(printable(f"no stored values of {args.metric_key} for series {args.series}"))
        return EXIT_OK
    # The band settings (steps and constraint literals) and the series identity head each
    # coordinate's rows once, rather than repeating on every row.
    groups: dict[tuple[str, str, str, str], list[dict]] = {}
    for r in rows:
        groups.setdefault((r["backend"], r["suite"], r["steps_key"], r["constraint_key"]), []).append(r)
    header = ("LOGICAL DATE", "RUN", "ROLE", "STATUS", "STEP", "VALUE")
    blocks = []
    for (backend, suite, steps_key, constraint_key), members in groups.items():
        table = [
            [printable(cell) for cell in (r["logical_date"], r["run_id"], r["role"], r["status"],
             f"last@{r['at_step']}" if r["step"] == -1 else str(r["step"]), f"{r['value']:.6g}")]
            for r in members
        ]
        heading = printable(f"{args.metric_key}, steps {steps_key}, constraint {constraint_key} "
                            f"(series {args.series}, backend {backend}, suite {suite})")
        blocks.append("\n".join([heading, *("  " + line for line in format_columns(header, table))]))
    print("\n\n".join(blocks))
    return EXIT_OK


def _cmd_mark(args: argparse.Namespace) -> int:
    if args.run_id:
        by, key, option = "run_id", args.run_id, "--run-id"
    elif args.airflow_run_id:
        by, key, option = "airflow_run_id", args.airflow_run_id, "--airflow-run-id"
        if not args.dag_id:
            raise UsageError(
                "--airflow-run-id needs --dag-id: Airflow run ids such as scheduled__<date> repeat in every DAG"
            )
    else:
        by, key, option = "commit", args.commit, "--commit"
    scope = {"dag_id": args.dag_id, "series": args.series, "backend": args.backend, "suite": args.suite}
    with open_store(args.store) as store:
        marked = store.mark_runs(args.status, by=by, key=key, reason=args.reason, marked_by=current_user(), **scope)
    searched = " ".join([f"{option} {key}"] + [f"--{k.replace('_', '-')} {v}" for k, v in scope.items() if v])
    if not marked:
        print(printable(f"metric-gate: error: nothing matched {searched} in the metric store; nothing was changed"),
              file=sys.stderr)
        return EXIT_BAD_INPUT
    header = ("RUN", "SERIES", "BACKEND", "SUITE", "LOGICAL DATE", "STATUS", "REASON")
    rows = []
    for m in marked:
        change = f"{m.run.status} -> {m.status}" if m.changed else f"already {m.status}"
        if m.reason == m.run.status_reason:
            note = "(unchanged)" if m.reason is None else f"{m.reason} (unchanged)"
        else:
            note = f"{m.reason} (reason recorded)"
        rows.append((m.run.run_id, m.run.series, m.run.backend, m.run.suite, m.run.logical_date.isoformat(), change,
                     note))
    print("\n".join(format_columns(header, [list(map(printable, row)) for row in rows])))
    changed = sum(m.changed for m in marked)
    print(printable(f"marked {changed} run(s) {args.status} ({len(marked)} run(s) match {searched})"))
    return EXIT_OK


def _cmd_runs(args: argparse.Namespace) -> int:
    with open_store(args.store, read_only=True) as store:
        runs = store.list_runs(series=args.series, backend=args.backend, suite=args.suite, limit=args.limit)
    table = [
        {"run_id": r.run_id, "series": r.series, "backend": r.backend, "suite": r.suite,
         "logical_date": r.logical_date.isoformat(), "role": r.role, "status": r.status,
         "status_reason": r.status_reason, "airflow_run_id": r.provenance.get("airflow_run_id"),
         "commit_sha": r.provenance.get("commit_sha")}
        for r in runs
    ]
    if args.json:
        print(json.dumps(table, indent=2))
        return EXIT_OK
    if not table:
        print("no stored runs")
        return EXIT_OK
    keys = ("logical_date", "run_id", "series", "backend", "suite", "role", "status", "status_reason")
    header = [k.upper().replace("_", " ") for k in keys]
    print("\n".join(format_columns(header, [[printable(row[k] or "") for k in keys] for row in table])))
    return EXIT_OK


def _cmd_show(args: argparse.Namespace) -> int:
    from airflow_metric_gate.pipeline import evaluate

    with open_store(args.store, read_only=True) as store:
        if store.get_run(args.run_id) is None:
            raise StoreInputError(f"no run {args.run_id!r} in the metric store; see `metric-gate runs`")
        verdict = evaluate(store, args.run_id, history_limit=args.history_limit, min_history=args.min_history,
                           aggregate=args.aggregate, all_results=args.all, max_results=args.max_results,
                           record=False)
    if args.json:
        print(json.dumps(verdict, indent=2))
    else:
        print(render_report(verdict, table_rows=_table_rows(args), where=_where(verdict, args)))
    return EXIT_OK


def _cmd_replay(args: argparse.Namespace) -> int:
    from airflow_metric_gate.replay import render_replay, replay

    declarations = with_policy(load_gates_file(args.gates), args.policy) if args.gates else None
    with open_store(args.store, read_only=True) as store:
        report = replay(store, args.series, args.backend, args.suite, declarations=declarations,
                        history_limit=args.history_limit, min_history=args.min_history, aggregate=args.aggregate,
                        trust=args.trust, policy=args.policy)
    print(json.dumps(report, indent=2) if args.json else render_replay(report))
    return EXIT_OK


def _cmd_accept(args: argparse.Namespace) -> int:
    from airflow_metric_gate.accept import accept_level

    with open_store(args.store) as store:
        result = accept_level(store, args.series, args.backend, args.suite, since=args.since, reason=args.reason)
    print(printable(
        f"accepted the level of series {args.series} (backend {args.backend}, suite {args.suite}) from "
        f"{result['since']} (store run {result['since_run_id']}): rebaseline marker set there, "
        f"{result['marked']} of {result['nights']} night(s) marked trusted"))
    return EXIT_OK


def _cmd_rebaseline(args: argparse.Namespace) -> int:
    with open_store(args.store) as store:
        if store.get_run(args.run_id) is None:
            raise StoreInputError(f"the metric store has no run {args.run_id!r}")
        changed = store.mark_rebaseline(args.run_id, on=not args.undo)
    state = "removed from" if args.undo else "set on"
    print(printable(f"rebaseline marker {state} run {args.run_id} ({changed} changed)"))
    return EXIT_OK


def _cmd_prune(args: argparse.Namespace) -> int:
    before = None
    if args.before is not None:
        try:
            before = utc(parse_datetime(args.before, "--before"))
        except (ValueError, OverflowError) as exc:
            raise UsageError(str(exc)) from None
    if args.keep is None and before is None:
        raise UsageError("prune needs --keep N or --before DATE (or both)")
    with open_store(args.store) as store:
        result = store.prune(keep=args.keep, before=before, protect=candidate_limit(args.history_limit),
                             series=args.series, backend=args.backend, suite=args.suite, force=args.force,
                             dry_run=args.dry_run)
    if args.json:
        _emit(json.dumps({**result, "dry_run": args.dry_run}, indent=2))
        return EXIT_OK
    verb = "would remove" if args.dry_run else "removed"
    line = (f"{verb} {result['nights']} night(s) ({result['values']} value(s)) of {result['series']} series "
            f"identit{'y' if result['series'] == 1 else 'ies'}")
    if result["partitions_dropped"]:
        line += f", {len(result['partitions_dropped'])} whole month(s) as partitions"
    if result["kept_for_baselines"]:
        line += (f"; kept {result['kept_for_baselines']} matching night(s) that a current baseline uses "
                 "(--force removes them too)")
    print(printable(line))
    return EXIT_OK


def _cmd_db(args: argparse.Namespace) -> int:
    with open_store(args.store) as store:
        before, after = store.upgrade()
        where = store.description
    print(f"metric store {where}: schema version {after}" + (f" (was {before})" if before != after else ""))
    return EXIT_OK


def _cmd_demo(args: argparse.Namespace) -> int:
    from airflow_metric_gate.demo import WorkdirInUse, run_demo

    try:
        return run_demo(workdir=args.workdir, nights=args.nights, fresh=args.fresh)
    except WorkdirInUse as exc:
        raise UsageError(str(exc)) from None


_COMMANDS = {
    "run": _cmd_run,
    "check": _cmd_check,
    "history": _cmd_history,
    "mark-untrusted": _cmd_mark,
    "mark-trusted": _cmd_mark,
    "runs": _cmd_runs,
    "show": _cmd_show,
    "rebaseline": _cmd_rebaseline,
    "accept": _cmd_accept,
    "replay": _cmd_replay,
    "db": _cmd_db,
    "prune": _cmd_prune,
    "demo": _cmd_demo,
}


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


def _unavailable_label(exc: Exception) -> str:
    if isinstance(exc, StorageUnavailable):
        return "storage unavailable (retry later)"
    if isinstance(exc, StoreUnavailable):
        return "store unavailable (retry later)"
    if isinstance(exc, StoreError):
        return "store error"
    return "unavailable (retry later)"


def _bad_input(args: argparse.Namespace, exc: BaseException) -> int:
    _error(f"error: {exc}")
    if args.command in _WRITING_COMMANDS:
        _error("nothing was stored")
    return EXIT_BAD_INPUT


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
