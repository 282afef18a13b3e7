"""PersistValuesOperator: idempotent writes keyed on the Airflow run, roles from the run type."""

from __future__ import annotations

import json
from datetime import datetime, timezone

import pytest
from _fakes import LOGICAL_DATE, chained, context
from _stores import StoreDatabase
from airflow.sdk.exceptions import AirflowException, AirflowFailException

from airflow_metric_gate.declarations import declare
from airflow_metric_gate.operators.ingest import IngestRecordOperator
from airflow_metric_gate.operators.persist import PersistValuesOperator
from airflow_metric_gate.operators.select import SelectStepsOperator
from airflow_metric_gate.pipeline import SeriesIdentity, airflow_store_run_id, selection_to_payload
from airflow_metric_gate.selection import Selection

# These tests give PersistValuesOperator its values inline (the deprecated version 1 selection).
pytestmark = pytest.mark.filterwarnings("ignore:a selection with its values inline:DeprecationWarning")

CONSTRAINT = {"rel_up": 0.5, "rel_down": 0.5}


def _payload(values=(1.0, 1.1, 1.2)) -> dict:
    declaration = declare("train/grad_norm", steps="all", constraint=CONSTRAINT)
    points = [(step, value, step) for step, value in enumerate(values)]
    errored = declare("rollout/raw_reward", steps="all", constraint=CONSTRAINT)
    return selection_to_payload(
        [Selection(declaration, points=points), Selection(errored, error="metric absent from the record")]
    )


def _persist(**kwargs) -> PersistValuesOperator:
    kwargs.setdefault("selection", _payload())
    kwargs.setdefault("series", "rl-7b")
    return PersistValuesOperator(task_id="persist_values", suite="nightly-8xh100", **kwargs)


def test_writes_run_and_values_and_returns_compact_identity(db):
    result = _persist().execute(context(dag_id="nightly", run_id="scheduled__2026-11-30"))

    identity = SeriesIdentity("rl-7b", "cuda", "nightly-8xh100")
    run_id = airflow_store_run_id("nightly", "scheduled__2026-11-30", -1, task_id="task", identity=identity)
    assert result == {
        "run_id": run_id,
        "rows": 3,
        "errors": 1,
        "declarations": 2,
        "write_version": 1,
        "series": "rl-7b",
        "backend": "cuda",
        "suite": "nightly-8xh100",
        "role": "baseline",
        "logical_date": LOGICAL_DATE.isoformat(),
    }
    assert json.loads(json.dumps(result)) == result
    assert db.query("SELECT step, value FROM metric_values WHERE run_id = ? ORDER BY step", run_id) == [
        (0, 1.0),
        (1, 1.1),
        (2, 1.2),
    ]
    ((status, role, dag_id, airflow_run_id),) = db.query(
        "SELECT status, role, dag_id, airflow_run_id FROM runs WHERE run_id = ?", run_id
    )
    assert (status, role, dag_id, airflow_run_id) == (
        "pending",
        "baseline",
        "nightly",
        "scheduled__2026-11-30",
    )


def test_retry_or_clear_replaces_its_own_rows(db):
    _persist(selection=_payload((1.0, 1.1, 1.2))).execute(context(try_number=1))
    result = _persist(selection=_payload((2.0, 2.1))).execute(context(try_number=2))

    assert db.query("SELECT COUNT(*) FROM runs") == [(1,)]
    assert db.query("SELECT step, value FROM metric_values ORDER BY step") == [(0, 2.0), (1, 2.1)]
    assert db.query("SELECT try_number FROM runs WHERE run_id = ?", result["run_id"]) == [(2,)]


def test_mapped_task_instances_are_distinct_runs(db):
    first = _persist().execute(context(map_index=0))
    second = _persist().execute(context(map_index=1))
    again = _persist().execute(context(map_index=1, try_number=2))

    assert first["run_id"] != second["run_id"] == again["run_id"]
    assert db.query("SELECT COUNT(*) FROM runs") == [(2,)]
    assert db.query("SELECT COUNT(*) FROM metric_values") == [(6,)]


def test_two_chains_in_one_dag_run_are_distinct_runs(db):
    seven = _persist().execute(context(task_id="persist_7b"))
    seventy = PersistValuesOperator(task_id="persist_70b", series="rl-70b", selection=_payload((5.0,))).execute(
        context(task_id="persist_70b")
    )
    same_task_other_series = _persist(series="rl-1b").execute(context(task_id="persist_7b"))

    assert len({seven["run_id"], seventy["run_id"], same_task_other_series["run_id"]}) == 3
    rows = db.query("SELECT series, COUNT(*) FROM runs JOIN metric_values USING (run_id) GROUP BY series")
    assert sorted(rows) == [
        ("rl-1b", 3),
        ("rl-70b", 1),
        ("rl-7b", 3),
    ]


@pytest.mark.parametrize(
    ("run_type", "role", "expected"),
    [
        ("scheduled", "auto", "baseline"),
        ("backfill", "auto", "baseline"),
        ("manual", "auto", "shadow"),
        ("asset_triggered", "auto", "baseline"),  # a run the training job's Asset event made: a night
        ("manual", "baseline", "baseline"),
        ("scheduled", "shadow", "shadow"),
        ("manual", "", "shadow"),  # what a template renders for an empty param
    ],
)
def test_role_from_run_type_unless_overridden(db, run_type, role, expected):
    result = _persist(role=role).execute(context(run_type=run_type))
    assert result["role"] == expected
    assert db.query("SELECT role FROM runs") == [(expected,)]


def test_unknown_role_fails_without_retry(db):
    with pytest.raises(AirflowFailException, match="role"):
        _persist(role="prod").execute(context())


def test_run_without_logical_date_uses_run_after(db):
    ctx = context(run_type="manual", logical_date=None)
    ctx["dag_run"].run_after = datetime(2026, 12, 1, 6, 30, tzinfo=timezone.utc)
    assert _persist().execute(ctx)["logical_date"] == "2026-12-01T06:30:00+00:00"


def test_provenance_is_kept(db):
    _persist(commit_sha="abc123", training_job_id="job-42", provenance={"cluster": "h100-a"}).execute(context())
    ((commit, job, provenance),) = db.query("SELECT commit_sha, training_job_id, provenance FROM runs")
    assert (commit, job) == ("abc123", "job-42")
    assert json.loads(provenance)["cluster"] == "h100-a"


def test_selection_from_upstream_xcom(db):
    op = chained(PersistValuesOperator, upstream_task_id="select_steps", series="rl-7b")
    assert op.execute(context(upstream={("select_steps", -1): _payload()}))["rows"] == 3


def test_mapped_selection_is_read_at_the_same_map_index(db):
    op = chained(PersistValuesOperator, upstream_task_id="select_steps", series="rl-7b")
    upstream = {("select_steps", 0): _payload((1.0,)), ("select_steps", 1): _payload((1.0, 2.0))}
    assert op.execute(context(map_index=1, upstream=upstream))["rows"] == 2


def _reference(tmp_path, rewards=(0.5, 0.7)):
    record = tmp_path / "night.jsonl"
    record.write_text(
        json.dumps({"metric": "train/grad_norm", "series": [[0, 1.0], [1, 1.1], [2, 1.2]]}) + "\n"
        + json.dumps({"metric": "rollout/raw_reward", "series": [[s, r] for s, r in enumerate(rewards)]}) + "\n"
    )
    summary = IngestRecordOperator(task_id="ingest_record", location=str(record)).execute(context())
    gates = [{"metric_key": "train/grad_norm", "steps": "all", "constraint": CONSTRAINT},
             {"metric_key": "train/absent", "steps": "all", "constraint": CONSTRAINT}]
    return record, SelectStepsOperator(task_id="select_steps", record=summary, gates=gates).execute(context())


def test_values_are_selected_from_the_record_the_reference_pins(db, tmp_path):
    _, reference = _reference(tmp_path)
    result = _persist(selection=reference).execute(context())
    assert (result["rows"], result["errors"], result["declarations"]) == (3, 1, 2)
    assert db.query("SELECT step, value FROM metric_values ORDER BY step") == [(0, 1.0), (1, 1.1), (2, 1.2)]
    ((errors,),) = db.query("SELECT selection_errors FROM runs")
    assert "train/absent" in errors


def test_record_changed_after_ingest_fails_without_retry_naming_it_and_stores_nothing(db, tmp_path):
    record, reference = _reference(tmp_path)
    record.write_text(record.read_text().replace("1.1", "9.9"))
    with pytest.raises(AirflowFailException, match=rf"{record}.* changed after it was ingested") as err:
        _persist(selection=reference).execute(context())
    assert "nothing was stored" in str(err.value)
    assert db.count("metric_values") == 0


def test_record_gone_after_ingest_fails_without_retry(db, tmp_path):
    record, reference = _reference(tmp_path)
    record.unlink()
    with pytest.raises(AirflowFailException, match="bad training record"):
        _persist(selection=reference).execute(context())


def test_malformed_reference_fails_without_retry(db, tmp_path):
    _, reference = _reference(tmp_path)
    with pytest.raises(AirflowFailException, match="checksum"):
        _persist(selection={**reference, "checksum": "abc"}).execute(context())


def test_no_declarations_stores_nothing(db):
    result = _persist(selection=selection_to_payload([])).execute(context())
    assert (result["declarations"], result["rows"]) == (0, 0)
    assert db.tables() == set()  # the store was not even opened


def test_garbage_selection_fails_without_retry(db):
    with pytest.raises(AirflowFailException, match="selection"):
        _persist(selection={"rows": 3}).execute(context())


def test_store_outage_is_retryable(monkeypatch):
    monkeypatch.setenv("AIRFLOW_CONN_METRIC_GATE_DB", "postgresql://nobody@127.0.0.1:9/none?connect_timeout=2")
    with pytest.raises(AirflowException, match="unavailable") as err:
        _persist().execute(context())
    assert not isinstance(err.value, AirflowFailException)


def test_connection_of_the_wrong_type_fails_without_retry(monkeypatch):
    monkeypatch.setenv("AIRFLOW_CONN_METRIC_GATE_DB", "http://example.com")
    with pytest.raises(AirflowFailException, match="needs a metric_gate or postgres connection"):
        _persist().execute(context())


def test_conn_id_parameter_picks_the_connection(tmp_path, monkeypatch):
    path = tmp_path / "other.db"
    monkeypatch.setenv("AIRFLOW_CONN_OTHER_STORE", f"sqlite:///{path}")
    _persist(conn_id="other_store").execute(context())
    assert StoreDatabase(f"sqlite:///{path}").count("metric_values") == 3


def test_templated_fields():
    assert {"selection", "series", "backend", "suite", "role", "conn_id"} <= set(PersistValuesOperator.template_fields)


@pytest.mark.parametrize("series", ["rl\x00-7b", "r" * 257, "rl-\udc80"])
def test_series_over_the_key_limits_fails_without_retry_and_stores_nothing(db, series):
    with pytest.raises(AirflowFailException, match="series"):
        PersistValuesOperator(task_id="persist_values", series=series, selection=_payload()).execute(context())
    assert db.count("runs") == 0


def test_storage_conn_id_given_to_ingest_only_reaches_persist_through_xcom(db, tmp_path, monkeypatch):
    import airflow_metric_gate.operators.persist as persist_module
    import airflow_metric_gate.operators.select as select_module

    record = tmp_path / "night.jsonl"
    record.write_text(json.dumps({"metric": "train/grad_norm", "series": [[0, 1.0], [1, 1.1]]}) + "\n")
    summary = IngestRecordOperator(task_id="ingest_record", location=str(record),
                                   storage_conn_id="records_store").execute(context())
    assert summary["storage_conn_id"] == "records_store"
    gates = [{"metric_key": "train/grad_norm", "steps": "all", "constraint": CONSTRAINT}]
    reference = SelectStepsOperator(task_id="select_steps", record=summary, gates=gates).execute(context())
    assert reference["storage_conn_id"] == "records_store"
    used = []

    def spy(real):
        return lambda location, conn_id, *args: used.append(conn_id) or real(location, conn_id, *args)

    monkeypatch.setattr(persist_module, "checked_record", spy(persist_module.checked_record))
    assert _persist(selection=reference).execute(context())["rows"] == 2
    assert used == ["records_store"]
    # a select that reads the record itself (no checksum from ingest) reads it with that connection too
    monkeypatch.setattr(select_module, "pinned_record", spy(select_module.pinned_record))
    unpinned = {k: v for k, v in summary.items() if k != "checksum"}
    reference = SelectStepsOperator(task_id="select_steps", record=unpinned, gates=gates).execute(context())
    assert used[1:] == ["records_store"] and reference["storage_conn_id"] == "records_store"
    # select's own storage_conn_id wins
    own = SelectStepsOperator(task_id="select_steps", record=summary, gates=gates, storage_conn_id="other").execute(
        context())
    assert own["storage_conn_id"] == "other"
    assert "storage_conn_id" not in IngestRecordOperator(task_id="ingest_record", location=str(record)).execute(
        context())


@pytest.mark.filterwarnings("default::DeprecationWarning")
def test_an_inline_selection_still_persists_but_warns_naming_the_reference(db):
    with pytest.warns(DeprecationWarning, match=r"values inline \(version 1.*\) is deprecated as "
                                                r"PersistValuesOperator's selection; pass the reference "
                                                r"SelectStepsOperator returns \(version 2"):
        result = _persist().execute(context())
    assert (result["rows"], result["errors"], result["declarations"]) == (3, 1, 2)
