"""The commands that read or mend the store: ``history``, ``runs``, the marks, ``accept``, ``rebaseline``,
``prune``, ``db upgrade``, and ``demo``. Their tables go through the verdict report's column layout."""

from __future__ import annotations

import argparse
import json
import sys

from airflow_metric_gate.accept import current_user
from airflow_metric_gate.cli.exits import EXIT_BAD_INPUT, EXIT_OK
from airflow_metric_gate.cli.options import UsageError
from airflow_metric_gate.cli.output import _emit
from airflow_metric_gate.dates import parse_datetime, utc
from airflow_metric_gate.pipeline import candidate_limit
from airflow_metric_gate.printable import printable
from airflow_metric_gate.report import format_columns
from airflow_metric_gate.store import StoreInputError, open_store


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


