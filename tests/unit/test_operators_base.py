"""MetricGateBaseOperator: the one mapping of core errors to "retry" versus "fail now", and the hook."""

from __future__ import annotations

import pytest
from airflow.sdk.exceptions import AirflowException, AirflowFailException

from airflow_metric_gate.declarations import DeclarationError
from airflow_metric_gate.hooks.metric_store import MetricStoreHook
from airflow_metric_gate.operators._record_copy import RecordChanged
from airflow_metric_gate.operators.base import MetricGateBaseOperator, airflow_error
from airflow_metric_gate.operators.evaluate import EvaluateGateOperator
from airflow_metric_gate.operators.ingest import IngestRecordOperator
from airflow_metric_gate.operators.persist import PersistValuesOperator
from airflow_metric_gate.operators.select import SelectStepsOperator
from airflow_metric_gate.pipeline import EarlierRunsPending
from airflow_metric_gate.records import RecordError
from airflow_metric_gate.storage import StorageUnavailable
from airflow_metric_gate.store import StoreError, StoreFailure, StoreInputError, StoreUnavailable

FAIL_NOW = [
    StoreInputError("history_limit must be from 1 to 1000"),
    DeclarationError("steps must be a list", path="gates.yaml", line=3),
    RecordError("not valid JSON", path="night.jsonl", line=2),
    RecordChanged("s3://bucket/night", "a" * 64, "b" * 64),
]
RETRY = [
    StoreUnavailable("cannot connect to the metric store"),
    EarlierRunsPending("af-1", []),
    StorageUnavailable("cannot reach the storage of s3://bucket/night"),
    StoreError("metric store (postgres) error: deadlock detected"),
    StoreFailure("metric store (postgres) error: deadlock detected"),
]


def _operator() -> MetricGateBaseOperator:
    return MetricGateBaseOperator(task_id="gate_task")


@pytest.mark.parametrize("error", FAIL_NOW, ids=lambda e: type(e).__name__)
def test_bad_input_fails_now(error):
    with pytest.raises(AirflowFailException) as err, _operator().core_errors():
        raise error
    assert str(err.value).startswith("gate_task: ")
    assert err.value.__cause__ is error


@pytest.mark.parametrize("error", RETRY, ids=lambda e: type(e).__name__)
def test_unavailable_store_or_storage_retries(error):
    with pytest.raises(AirflowException) as err, MetricGateBaseOperator(task_id="gate_task", retries=2).core_errors():
        raise error
    assert not isinstance(err.value, AirflowFailException)
    assert "retry" in str(err.value)


@pytest.mark.parametrize("error", [StoreUnavailable("cannot connect"), StorageUnavailable("cannot reach s3://b/n"),
                                   StoreError("deadlock detected")], ids=lambda e: type(e).__name__)
def test_the_retry_wording_follows_the_task_retries(error):
    with pytest.raises(AirflowException) as err, MetricGateBaseOperator(task_id="t", retries=0).core_errors():
        raise error
    assert "will retry" not in str(err.value) and "retries=0" in str(err.value)
    assert not isinstance(err.value, AirflowFailException)  # still retryable: clearing the task tries again
    with pytest.raises(AirflowException) as err, MetricGateBaseOperator(task_id="t", retries=3).core_errors():
        raise error
    assert "will retry" in str(err.value)


def test_a_bad_record_is_named():
    converted = airflow_error(RecordError("not valid JSON", path="night.jsonl", line=2), "t", record="/data/night")
    assert str(converted) == "t: bad training record /data/night: night.jsonl:2: not valid JSON"
    assert str(RecordChanged("s3://b/night", "a" * 64, "b" * 64)).startswith("the training record s3://b/night changed")


def test_other_errors_pass_through_unchanged():
    with pytest.raises(KeyError), _operator().core_errors():
        raise KeyError("a bug is not the core's error")
    assert airflow_error(KeyError("x"), "t") is None
    already = AirflowFailException("decided already")
    with pytest.raises(AirflowFailException) as err, _operator().core_errors():
        raise already
    assert err.value is already


def test_no_password_in_a_converted_message_nor_its_cause():
    error = StoreUnavailable("could not connect to postgresql://gate:Hunter2Secret@db/x")
    with pytest.raises(AirflowException) as err, _operator().core_errors():
        raise error
    assert "Hunter2Secret" not in str(err.value) and "gate:***@db" in str(err.value)
    assert err.value.__cause__ is None  # the original text shows the password: not chained


def test_bad_input_helper():
    err = _operator().bad_input("format must be one of series, rows")
    assert isinstance(err, AirflowFailException)
    assert str(err) == "gate_task: format must be one of series, rows"


def test_hook_is_built_once_from_the_rendered_conn_id():
    op = PersistValuesOperator(task_id="persist_values", series="rl", conn_id="{{ params.store }}")
    op.conn_id = "rendered_store"  # what template rendering does before execute
    assert isinstance(op.hook, MetricStoreHook)
    assert op.hook.metric_gate_conn_id == "rendered_store"
    assert op.hook is op.hook


@pytest.mark.parametrize(
    "operator",
    [IngestRecordOperator, SelectStepsOperator, PersistValuesOperator, EvaluateGateOperator],
)
def test_the_four_operators_share_the_base(operator):
    assert issubclass(operator, MetricGateBaseOperator)


@pytest.mark.parametrize("operator", [PersistValuesOperator, EvaluateGateOperator])
def test_store_operators_template_conn_id(operator):
    assert "conn_id" in operator.template_fields
