"""Nightly metric gate: wait for the training record, then ingest, select, persist and evaluate it.

The five tasks come from one call of the ``metric_gate`` task group (task ids
``metric_gate.<task>``); ``examples/nightly_metric_gate_by_hand.py`` in the repository composes the
same five operators by hand.  Copy this file (and ``gates/nightly_metric_gate.yaml`` beside it)
into your DAGs folder and adjust the params, or trigger it with other params for a one-off run.
"""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pendulum
from airflow.sdk import DAG, Param

from airflow_metric_gate.declarations import check_declarations
from airflow_metric_gate.task_groups import metric_gate

#: The gates file a run uses unless its params name another (relative to this file's folder).
GATES_FILE = "gates/nightly_metric_gate.yaml"
# The param is templated, so the night reads it; its default is checked now (when it is here): a
# bad default gates file is a DAG import error in the Airflow UI, not a failed night.
check_declarations(gates_file=GATES_FILE, relative_to=str(Path(__file__).parent))

DOC_MD = """
### Nightly metric gate

Every night the training job writes its metrics under `<record_root>/<YYYY-MM-DD>` (a JSON Lines
file or a directory of them) and a `_SUCCESS` marker when done. This DAG waits for that record,
selects the steps each gate in `gates_file` asks for, stores them in the metric store (Airflow
connection `metric_gate_db`, type postgres) and compares each value with the history of the same
metric, declaration and step. The five tasks sit in the `metric_gate` task group: their ids are
`metric_gate.wait_for_record`, `metric_gate.ingest_record`, `metric_gate.select_steps`,
`metric_gate.persist_values` and `metric_gate.evaluate_gate`.

**Roles.** Scheduled runs are *baseline* runs: when trusted they feed future baselines, and an
enforced FAIL or ERROR fails `metric_gate.evaluate_gate`. Manual runs are *shadow* runs: stored
and reported, never failed by a regression, never feeding baselines. The `role` param overrides
this. A run triggered without a logical date (`airflow dags trigger`) gates the night in the
`night` param; a baseline run needs one: `--conf '{"night": "2026-11-30", "role": "baseline"}'`.

#### When this DAG fails

* `metric_gate.wait_for_record`: no complete record in time. The message says whether the record
  or its `_SUCCESS` marker is missing. Check the training job; clear the task once the output is
  there.
* `metric_gate.ingest_record` or `metric_gate.select_steps`: the record or the gates file is
  malformed; the message names file and line. Fix the input, then clear the task (bad input is not
  retried).
* `metric_gate.persist_values` or `metric_gate.evaluate_gate` up for retry: the metric store is
  unreachable. Nothing was half-written; check the `metric_gate_db` database, retries resume on
  their own.
* `metric_gate.evaluate_gate` failed: **a regression**, an enforced value left its band. Read on.

For a regression, open the `metric_gate.evaluate_gate` log. Its first lines say what regressed,
one line per failing declaration, worst first:

    REGRESSED <metric> (steps <steps>): <f> of <n> steps FAIL, steps <first>..<last>, below band,
    worst step <step>: <value> vs baseline <ref> (<change>; band <lo>..<hi>)

Then one line sums the run up (grep `metric-gate:`):

    metric-gate: <series> run <id>: NOT-TRUSTED (<n> results, <f> fail, <e> error)

Below it, a table lists the worst FAILs of each declaration (value, baseline mean of the last
trusted nights, band, which side it left and whether the relative term or the absolute floor set
that side) and each ERROR (a metric missing from the record, a duplicate step, a non-finite
value...). The full verdict is the task's XCom `return_value` (JSON, `schema`
`airflow-metric-gate/verdict/v1`); `metric-gate show <store run id> --all` lists every result.

* A real regression: leave the run untrusted (it will not poison future baselines) and raise it
  with the training team.
* A false alarm, or an intended change: mark the run trusted
  (`metric-gate mark-trusted --run-id <store run id>`, the id is in the summary line) or
  allowlist the declaration in the gates file with a reason.
* ERROR results usually mean the record changed shape (renamed metric, new logging cadence).

Clearing a task re-runs it in place: rows are keyed on the Airflow run, never duplicated.
Clear `metric_gate.persist_values` together with its downstream `metric_gate.evaluate_gate` so
the night is judged again; a re-persisted night stays `pending` (feeding no baseline) until it is
evaluated.
"""

# The night's date: the `night` param, else the run's logical date (a manual run may have none).
NIGHT = "{{ params.night or (dag_run.logical_date or dag_run.run_after) | ds }}"

# [START dag]
with DAG(
    dag_id="nightly_metric_gate",
    description="Gate nightly training metrics against the history of each coordinate",
    schedule="@daily",
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    catchup=False,
    max_active_runs=1,
    doc_md=DOC_MD,
    tags=["metric-gate", "ml"],
    default_args={"retries": 3, "retry_delay": timedelta(minutes=5), "retry_exponential_backoff": True},
    params={
        "record_root": Param(
            "/data/training/nightly",
            type="string",
            description="Folder or object-storage URI (s3://..., gs://..., file://...) holding one "
            "record per night, named YYYY-MM-DD.",
        ),
        "night": Param(
            "",
            type="string",
            description="Night to gate (YYYY-MM-DD); empty: the run's logical date.",
        ),
        "gates_file": Param(
            GATES_FILE,
            type="string",
            description="Gates file (YAML, JSON, or Python with register_ci_gate calls); relative "
            "paths start at this DAG file's folder.",
        ),
        "series": Param("rl-finetune", type="string", description="Training job whose nights are comparable."),
        "backend": Param("cuda", type="string", description="Hardware backend."),
        "suite": Param("nightly-8xh100", type="string", description="Schedule or cluster."),
        "role": Param(
            "auto",
            enum=["auto", "baseline", "shadow"],
            description="auto: scheduled runs are baseline, manual runs shadow.",
        ),
    },
) as dag:
    # [END dag]
    # [START pipeline]
    metric_gate(
        series="{{ params.series }}",
        backend="{{ params.backend }}",
        suite="{{ params.suite }}",
        path="{{ params.record_root }}/" + NIGHT,
        gates_file="{{ params.gates_file }}",
        role="{{ params.role }}",
        night="{{ params.night }}",
    )
    # [END pipeline]
