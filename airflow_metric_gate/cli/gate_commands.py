"""The commands that judge: ``run`` (ingest, select, store, evaluate), ``check``, ``show`` and ``replay``.

``load_gates_file`` and ``render_report`` are looked up on :mod:`airflow_metric_gate.cli` when a command
runs, so that the package's public names are the ones a caller (or a test) replaces.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys

import airflow_metric_gate.cli as package
from airflow_metric_gate.cli.exits import EXIT_BAD_INPUT, EXIT_BLOCKED, EXIT_OK, EXIT_STORE_UNAVAILABLE, _error
from airflow_metric_gate.cli.options import UsageError, _logical_date
from airflow_metric_gate.cli.output import _emit, _skipped_reporter, _table_rows, _where
from airflow_metric_gate.declarations import DeclarationError, collapse_duplicates, with_policy
from airflow_metric_gate.enums import RecordFormat
from airflow_metric_gate.errors import LocatedError
from airflow_metric_gate.limits import MAX_NAME_BYTES, key_problem
from airflow_metric_gate.pipeline import (
    EarlierRunsPending,
    EvaluateOptions,
    RunInfo,
    SeriesIdentity,
    new_run_id,
    run_gate,
)
from airflow_metric_gate.printable import printable
from airflow_metric_gate.records import Record, read_record
from airflow_metric_gate.report import warning_lines
from airflow_metric_gate.storage import is_uri, record_path, storage_errors
from airflow_metric_gate.store import StoreInputError, open_store


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
            return read_record(args.record, format=args.format)
    with contextlib.redirect_stdout(sys.stderr), storage_errors(args.record):
        location = record_path(args.record, conn_id=args.storage_conn_id) if is_uri(args.record) else args.record
        return read_record(location, format=args.format)


def _evaluate_options(args: argparse.Namespace, *, enforce: bool | None = None) -> EvaluateOptions:
    """The evaluate options of ``run`` and ``show``: history, aggregate, and what the verdict lists."""
    return EvaluateOptions(history_limit=args.history_limit, min_history=args.min_history, aggregate=args.aggregate,
                           enforce=enforce, all_results=args.all, max_results=args.max_results)


def _cmd_run(args: argparse.Namespace) -> int:
    _check_names(args)
    declarations, warnings = collapse_duplicates(with_policy(package.load_gates_file(args.gates), args.policy))
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
                format=args.format, options=_evaluate_options(args, enforce=args.enforce),
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
        _emit(str(package.render_report(verdict, table_rows=_table_rows(args), where=_where(verdict, args))))
    return EXIT_BLOCKED if verdict["blocking"] else EXIT_OK


def _cmd_check(args: argparse.Namespace) -> int:
    """Read every gates file as ``run`` and ``SelectStepsOperator`` do: exit 2 when any is invalid."""
    bad = 0
    report: dict[str, object] = {}
    for path in args.gates:
        try:
            declarations, warnings = collapse_duplicates(package.load_gates_file(path))
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


def _cmd_show(args: argparse.Namespace) -> int:
    from airflow_metric_gate.pipeline import evaluate

    with open_store(args.store, read_only=True) as store:
        if store.get_run(args.run_id) is None:
            raise StoreInputError(f"no run {args.run_id!r} in the metric store; see `metric-gate runs`")
        verdict = evaluate(store, args.run_id, options=_evaluate_options(args), record=False)
    if args.json:
        print(json.dumps(verdict, indent=2))
    else:
        print(package.render_report(verdict, table_rows=_table_rows(args), where=_where(verdict, args)))
    return EXIT_OK


def _cmd_replay(args: argparse.Namespace) -> int:
    from airflow_metric_gate.replay import render_replay, replay

    declarations = with_policy(package.load_gates_file(args.gates), args.policy) if args.gates else None
    with open_store(args.store, read_only=True) as store:
        report = replay(store, args.series, args.backend, args.suite, declarations=declarations,
                        history_limit=args.history_limit, min_history=args.min_history, aggregate=args.aggregate,
                        trust=args.trust, policy=args.policy)
    print(json.dumps(report, indent=2) if args.json else render_replay(report))
    return EXIT_OK


