"""The gate as four stages: ingest, select, persist, evaluate.

The command line runs them in one process (:func:`run_gate`); the Airflow operators run one each
and pass small references between them through XCom (the values stay in the record and the
store).  Nothing here imports Airflow.  Each stage has a module of its own; every public name the
module had before it was split is importable from here.
"""

from __future__ import annotations

from airflow_metric_gate.pipeline.backfill import (
    MESSAGE_NIGHTS,
    EarlierRunsPending,
    describe_runs,
    wait_for_earlier_runs,
)
from airflow_metric_gate.pipeline.evaluating import empty_verdict, evaluate
from airflow_metric_gate.pipeline.gate import run_gate
from airflow_metric_gate.pipeline.history import candidate_limit, starved_reason
from airflow_metric_gate.pipeline.identity import RunInfo, SeriesIdentity, airflow_store_run_id, new_run_id
from airflow_metric_gate.pipeline.options import OPTION_NAMES, EvaluateOptions, check_evaluate_options, evaluate_options
from airflow_metric_gate.pipeline.payload import (
    PAYLOAD_DEPRECATED,
    SELECTION_PAYLOAD_VERSION,
    payload_to_selection,
    selection_to_payload,
)
from airflow_metric_gate.pipeline.persisting import WARNINGS_KEY, check_run, persist
from airflow_metric_gate.pipeline.selecting import ingest, record_warnings, select

__all__ = [
    "MESSAGE_NIGHTS",
    "OPTION_NAMES",
    "PAYLOAD_DEPRECATED",
    "SELECTION_PAYLOAD_VERSION",
    "WARNINGS_KEY",
    "EarlierRunsPending",
    "EvaluateOptions",
    "RunInfo",
    "SeriesIdentity",
    "airflow_store_run_id",
    "candidate_limit",
    "check_evaluate_options",
    "check_run",
    "describe_runs",
    "empty_verdict",
    "evaluate",
    "evaluate_options",
    "ingest",
    "new_run_id",
    "payload_to_selection",
    "persist",
    "record_warnings",
    "run_gate",
    "select",
    "selection_to_payload",
    "starved_reason",
    "wait_for_earlier_runs",
]
