"""SelectStepsOperator: declarations from a gates file or the DAG file; a reference to the record out, no values."""

from __future__ import annotations

import json

import pytest
from _fakes import chained, context
from airflow.sdk import DAG
from airflow.sdk.exceptions import AirflowFailException

from airflow_metric_gate.declarations import DeclarationError, declare
from airflow_metric_gate.operators.ingest import IngestRecordOperator
from airflow_metric_gate.operators.select import SelectStepsOperator, reference_declarations
from airflow_metric_gate.records import read_record
from airflow_metric_gate.selection import select_steps

CONSTRAINT = {"rel_up": 0.5, "rel_down": 0.5}


@pytest.fixture
def record(tmp_path):
    path = tmp_path / "night.jsonl"
    path.write_text(
        json.dumps({"metric": "train/grad_norm", "series": [[0, 1.0], [1, 1.1], [2, 1.2]]})
        + "\n"
        + json.dumps({"metric": "rollout/raw_reward", "series": [[0, 0.5], [1, 0.7]]})
        + "\n"
    )
    return path


@pytest.fixture
def gates_file(tmp_path):
    path = tmp_path / "gates.yaml"
    path.write_text("gates:\n  - metric_key: train/grad_norm\n  - metric_key: rollout/raw_reward\n    steps: last\n")
    return path


def _selected(payload):
    """What persist selects from the reference: the pinned record, the reference's declarations."""
    record = read_record(payload["location"], format=payload["format"])
    return select_steps(record, reference_declarations(payload))


def test_gates_file_gives_a_reference_without_values(record, gates_file):
    payload = SelectStepsOperator(task_id="select", record=str(record), gates_file=str(gates_file)).execute(context())
    assert json.loads(json.dumps(payload)) == payload
    assert payload["version"] == 2
    assert (payload["location"], payload["format"]) == (str(record), "series")
    assert len(payload["checksum"]) == 64
    assert payload["counts"] == {"declarations": 2, "metrics": 2, "points": 5, "files": 1, "skipped": 0}
    assert "values" not in json.dumps(payload)
    selections = _selected(payload)
    assert [s.declaration.metric_key for s in selections] == ["train/grad_norm", "rollout/raw_reward"]
    assert [p[:2] for p in selections[0].points] == [(0, 1.0), (1, 1.1), (2, 1.2)]
    assert [p[:2] for p in selections[1].points] == [(-1, 0.7)]


def test_reference_does_not_grow_with_the_record(tmp_path, gates_file):
    sizes = []
    for points in (10, 10_000):
        path = tmp_path / f"night{points}.jsonl"
        path.write_text(json.dumps({"metric": "train/grad_norm", "series": [[s, 1.0 + s] for s in range(points)]}))
        op = SelectStepsOperator(task_id="select", record=str(path), gates_file=str(gates_file))
        sizes.append(len(json.dumps(op.execute(context()))))
    assert sizes[1] - sizes[0] < 16  # the points count's digits, nothing more


def test_gates_written_in_the_dag_file(record):
    gates = [
        {"metric_key": "rollout/raw_reward", "steps": [1], "constraint": CONSTRAINT},
        declare("train/grad_norm", steps=[0, 2], constraint=CONSTRAINT),
    ]
    payload = SelectStepsOperator(task_id="select", record=str(record), gates=gates).execute(context())
    assert [(s.declaration.metric_key, [p[0] for p in s.points]) for s in _selected(payload)] == [
        ("rollout/raw_reward", [1]),
        ("train/grad_norm", [0, 2]),
    ]


def test_defaults_extend_the_table_for_new_metrics(record):
    defaults = {"rollout/raw_reward": {"steps": [0], "constraint": CONSTRAINT}}
    payload = SelectStepsOperator(
        task_id="select", record=str(record), gates=[{"metric_key": "rollout/raw_reward"}], defaults=defaults
    ).execute(context())
    (selection,) = _selected(payload)
    assert [p[:2] for p in selection.points] == [(0, 0.5)]


def test_record_format_and_checksum_from_upstream_ingest_summary_without_reading_again(tmp_path, gates_file):
    rows = tmp_path / "rows.jsonl"
    rows.write_text(json.dumps({"step": 0, "train/grad_norm": 1.0, "rollout/raw_reward": 0.5}) + "\n")
    summary = IngestRecordOperator(task_id="ingest_record", location=str(rows), format="rows").execute(context())
    rows.unlink()  # select does not read the record ingest read and checked
    op = chained(SelectStepsOperator, upstream_task_id="ingest_record", gates_file=str(gates_file))
    payload = op.execute(context(upstream={("ingest_record", -1): summary}))
    assert (payload["format"], payload["checksum"]) == ("rows", summary["checksum"])
    assert payload["counts"]["points"] == summary["points"] == 2
    assert [d.metric_key for d in reference_declarations(payload)] == ["train/grad_norm", "rollout/raw_reward"]


def test_summary_without_checksum_is_read_and_pinned(tmp_path, gates_file):
    rows = tmp_path / "rows.jsonl"
    rows.write_text(json.dumps({"step": 0, "train/grad_norm": 1.0, "rollout/raw_reward": 0.5}) + "\n")
    summary = {"location": str(rows), "format": "rows", "metrics": 2, "points": 2, "files": 1}
    op = chained(SelectStepsOperator, upstream_task_id="ingest_record", gates_file=str(gates_file))
    payload = op.execute(context(upstream={("ingest_record", -1): summary}))
    ingested = IngestRecordOperator(task_id="ingest_record", location=str(rows), format="rows").execute(context())
    assert payload["checksum"] == ingested["checksum"]


def test_malformed_record_given_by_location_fails_without_retry(tmp_path, gates_file):
    bad = tmp_path / "bad.jsonl"
    bad.write_text("{x\n")
    with pytest.raises(AirflowFailException, match=r"bad\.jsonl:1"):
        SelectStepsOperator(task_id="select", record=str(bad), gates_file=str(gates_file)).execute(context())


def test_relative_gates_file_is_found_beside_the_dag_file(tmp_path, record, gates_file):
    with DAG(dag_id="relative_gates", schedule=None) as dag:
        op = SelectStepsOperator(task_id="select", record=str(record), gates_file=gates_file.name)
    dag.fileloc = str(tmp_path / "my_dag.py")
    assert len(op.execute(context())["declarations"]) == 2


@pytest.mark.parametrize(
    "gates",
    [
        [{"metric_key": "train/grad_norm", "steps": None}],
        [{"metric_key": "my/metric"}],  # no defaults entry
        [{"metric_key": "train/grad_norm", "constraint": {"direction": "up"}}],
    ],
)
def test_invalid_declarations_in_the_dag_file_are_refused_when_the_dag_is_parsed(record, gates):
    with pytest.raises(DeclarationError, match="gate 1"):
        SelectStepsOperator(task_id="select", record=str(record), gates=gates)


def test_a_bad_local_gates_file_is_refused_when_the_dag_is_parsed_naming_file_and_line(record, tmp_path):
    bad = tmp_path / "gates.yaml"
    bad.write_text("gates:\n  - metric_key: train/grad_norm\n    steps: sometimes\n")
    with pytest.raises(DeclarationError) as info:
        SelectStepsOperator(task_id="select", record=str(record), gates_file=str(bad))
    assert str(info.value).startswith(f"{bad}:2: ") and "steps" in str(info.value)


def test_a_templated_or_remote_gates_file_is_not_read_when_the_dag_is_parsed(record):
    for path in ("{{ params.gates_file }}", "s3://bucket/gates.yaml", "/no/such/gates.yaml"):
        SelectStepsOperator(task_id="select", record=str(record), gates_file=path)  # checked by the night's task


def test_a_gates_file_broken_after_the_dag_was_parsed_fails_the_night_without_retry(record, tmp_path):
    path = tmp_path / "gates.yaml"
    path.write_text("gates:\n  - metric_key: train/grad_norm\n")
    op = SelectStepsOperator(task_id="select", record=str(record), gates_file=str(path))
    path.write_text("gates:\n  - metric_key: my/metric\n")  # no defaults entry
    with pytest.raises(AirflowFailException, match="invalid gate declarations"):
        op.execute(context())


def test_a_gate_in_both_gates_file_and_gates_is_gated_once(record, gates_file, capsys):
    gates = [{"metric_key": "train/grad_norm"}]  # the same coordinate as the file's first gate
    payload = SelectStepsOperator(task_id="select", record=str(record), gates_file=str(gates_file),
                                  gates=gates).execute(context())
    assert [entry["metric_key"] for entry in payload["declarations"]] == ["train/grad_norm", "rollout/raw_reward"]
    logged = capsys.readouterr().out  # the task log (Airflow's logger writes to stdout here)
    assert "declared twice" in logged and f"{gates_file}:2" in logged and "select: gate 1" in logged


@pytest.mark.parametrize(
    ("field", "other"),
    [("enforce", {"enforce": True}), ("allowlist_reason", {"allowlist_reason": "known"}),
     ("min_failing_steps", {"min_failing_steps": 3})],
)
def test_a_gate_in_both_gates_file_and_gates_that_disagree_is_refused_when_the_dag_is_parsed(
    record, gates_file, field, other
):
    gates = [{"metric_key": "train/grad_norm", **other}]
    with pytest.raises(DeclarationError, match=f"declared twice with different {field}") as info:
        SelectStepsOperator(task_id="select", record=str(record), gates_file=str(gates_file), gates=gates)
    assert f"{gates_file}:2" in str(info.value) and "select: gate 1" in str(info.value)


def test_missing_gates_file_fails_without_retry(record, tmp_path):
    with pytest.raises(AirflowFailException, match="no such gates file"):
        SelectStepsOperator(task_id="select", record=str(record), gates_file=str(tmp_path / "x.yaml")).execute(
            context()
        )


def test_no_declarations_source_is_an_error(record):
    with pytest.raises(AirflowFailException, match="gates_file= or gates="):
        SelectStepsOperator(task_id="select", record=str(record)).execute(context())


def test_templated_fields():
    assert set(SelectStepsOperator.template_fields) == {"record", "gates_file", "format", "storage_conn_id", "policy"}
