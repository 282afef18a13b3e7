"""The CLI and the operators decide every package error alike: bad input fails now, an outage retries.

The CLI says it by its exit status (2 bad input, 3 unavailable, 4 a bug), the operators by the Airflow
exception they raise (``AirflowFailException``, a retryable ``AirflowException``, or the error itself).
"""

from __future__ import annotations

import importlib
import inspect
import pkgutil

import pytest
from airflow.sdk.exceptions import AirflowException, AirflowFailException

import airflow_metric_gate
from airflow_metric_gate import cli
from airflow_metric_gate.operators.base import MetricGateBaseOperator


def package_errors() -> list[type[BaseException]]:
    """Every exception class defined in a module of the package, each once, in a stable order."""
    found: dict[str, type[BaseException]] = {}
    for info in pkgutil.walk_packages(airflow_metric_gate.__path__, "airflow_metric_gate."):
        module = importlib.import_module(info.name)
        for value in vars(module).values():
            if (
                inspect.isclass(value)
                and issubclass(value, BaseException)
                and value.__module__.startswith("airflow_metric_gate.")
            ):
                found[f"{value.__module__}.{value.__qualname__}"] = value
    return [found[name] for name in sorted(found)]


#: Constructor arguments of the errors that take more than a message.
_ARGUMENTS: dict[str, tuple] = {
    "RecordChanged": ("s3://bucket/night", "a" * 64, "b" * 64),
    "RunRewritten": ("run-1", 1, 2),
    "EarlierRunsPending": ("run-1", []),
    "EventFileError": ("truncated", 12),
}


def sample(cls: type[BaseException]) -> BaseException:
    """An instance of ``cls`` as the package would raise it."""
    return cls(*_ARGUMENTS.get(cls.__name__, ("something is wrong",)))


ERRORS = package_errors()


def cli_fate(error: BaseException, monkeypatch: pytest.MonkeyPatch) -> str:
    """What ``metric-gate`` does when a command raises ``error``: ``fail``, ``retry`` or ``bug``."""

    def command(args):
        raise error

    monkeypatch.setitem(cli._COMMANDS, "runs", command)
    code = cli.main(["runs"])
    return {2: "fail", 3: "retry", 4: "bug"}[code]


def operator_fate(error: BaseException) -> str:
    """What an operator does when the core raises ``error``: ``fail``, ``retry`` or ``bug`` (passed on as is)."""
    try:
        with MetricGateBaseOperator(task_id="gate_task", retries=2).core_errors():
            raise error
    except AirflowFailException:
        return "fail"
    except AirflowException:
        return "retry"
    except BaseException as exc:
        assert exc is error
        return "bug"
    raise AssertionError("core_errors swallowed the error")


def test_the_walk_finds_the_package_errors() -> None:
    names = {cls.__name__ for cls in ERRORS}
    assert {"RecordError", "DeclarationError", "StoreInputError", "StoreUnavailable", "UsageError"} <= names


@pytest.mark.parametrize("cls", ERRORS, ids=lambda c: c.__name__)
def test_the_cli_and_the_operators_agree(cls, monkeypatch, capsys) -> None:
    error = sample(cls)
    by_cli, by_operator = cli_fate(error, monkeypatch), operator_fate(error)
    assert by_cli == by_operator, f"{cls.__name__}: the CLI does {by_cli!r}, the operators {by_operator!r}"
    assert by_cli != "bug", f"{cls.__name__} is the package's own error, yet neither bad input nor unavailable"
