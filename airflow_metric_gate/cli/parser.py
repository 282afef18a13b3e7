"""The ``metric-gate`` argument parser: every command, its options and their help (docs/cli.md mirrors it)."""

from __future__ import annotations

import argparse

from airflow_metric_gate import __version__
from airflow_metric_gate.cli.options import (
    _command,
    _HelpFormatter,
    _history_limit,
    _non_negative,
    _nonnegative,
    _policy_option,
    _positive,
    _seconds,
    _store_option,
    _stored_step,
    _table_rows_option,
)
from airflow_metric_gate.enums import AGGREGATES, RECORD_FORMATS, ROLES
from airflow_metric_gate.evaluation import DEFAULT_HISTORY_LIMIT, DEFAULT_MIN_HISTORY
from airflow_metric_gate.limits import MAX_HISTORY_LIMIT
from airflow_metric_gate.verdict import DEFAULT_MAX_RESULTS


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
