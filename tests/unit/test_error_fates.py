"""The CLI and the operators decide every package error alike: bad input fails now, an outage retries.

The CLI says it by its exit status (2 bad input, 3 unavailable, 4 a bug), the operators by the Airflow
exception they raise (``AirflowFailException``, a retryable ``AirflowException``, or the error itself).
"""

from __future__ import annotations

import ast
import importlib
import inspect
import pkgutil
from pathlib import Path

import pytest
from airflow.sdk.exceptions import AirflowException, AirflowFailException

import airflow_metric_gate
from airflow_metric_gate import cli
from airflow_metric_gate.errors import FATES, BadInputError, ErrorKind, MetricGateError, UnavailableError, error_kind
from airflow_metric_gate.operators.base import MetricGateBaseOperator
from airflow_metric_gate.store import StoreError


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
    "_NotLiteral": ("`f(x)` is not a literal", ast.Constant(1)),
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


#: The classes between the root and the kinds, which the package never raises as they are.
FAMILIES = {MetricGateError, StoreError}
KINDS = {BadInputError: ErrorKind.BAD_INPUT, UnavailableError: ErrorKind.UNAVAILABLE}


@pytest.mark.parametrize("cls", ERRORS, ids=lambda c: c.__name__)
def test_every_package_error_is_under_the_root_and_of_exactly_one_kind(cls) -> None:
    assert issubclass(cls, MetricGateError), f"{cls.__module__}.{cls.__qualname__} is not a MetricGateError"
    kinds = [kind for base, kind in KINDS.items() if issubclass(cls, base)]
    if cls in FAMILIES:
        assert kinds == []
    else:
        assert len(kinds) == 1, f"{cls.__qualname__} is of the kinds {kinds}"
        assert error_kind(sample(cls)) is kinds[0]


def test_the_package_never_raises_a_family_as_it_is() -> None:
    names = {cls.__name__ for cls in FAMILIES}
    found = []
    for path in Path(airflow_metric_gate.__file__).parent.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in names:
                found.append(f"{path.name}:{node.lineno}: {node.func.id}(...)")
    assert not found, found


def test_the_exit_statuses_are_the_kinds_fates() -> None:
    assert FATES[ErrorKind.BAD_INPUT].exit_status == cli.EXIT_BAD_INPUT == 2
    assert FATES[ErrorKind.UNAVAILABLE].exit_status == cli.EXIT_STORE_UNAVAILABLE == 3
    assert not FATES[ErrorKind.BAD_INPUT].retry and FATES[ErrorKind.UNAVAILABLE].retry


def test_an_error_that_is_not_the_packages_is_a_bug_to_both(monkeypatch, capsys) -> None:
    error = KeyError("a bug")
    assert error_kind(error) is None
    assert cli_fate(error, monkeypatch) == operator_fate(error) == "bug"
    assert cli_fate(ValueError("a bare ValueError"), monkeypatch) == "bug"


def test_a_familys_root_from_outside_the_package_retries_as_before(monkeypatch, capsys) -> None:
    error = StoreError("metric store (postgres) error: deadlock detected")
    assert cli_fate(error, monkeypatch) == operator_fate(error) == "retry"


# The sensor and its trigger decide by the kind too: bad input fails now, anything else retries.
_KINDS_OF = {cls: error_kind(sample(cls)) for cls in ERRORS if cls not in FAMILIES}
_BAD_INPUT_ERRORS = [cls for cls, kind in _KINDS_OF.items() if kind is ErrorKind.BAD_INPUT]
_UNAVAILABLE_ERRORS = [cls for cls, kind in _KINDS_OF.items() if kind is ErrorKind.UNAVAILABLE]


@pytest.mark.parametrize("cls", _BAD_INPUT_ERRORS + _UNAVAILABLE_ERRORS, ids=lambda c: c.__name__)
def test_the_trigger_reports_the_kind(cls, monkeypatch, tmp_path) -> None:
    import asyncio

    from airflow_metric_gate.triggers import training_output

    error = sample(cls)

    def check_location(*args, **kwargs):
        raise error

    monkeypatch.setattr(training_output, "check_location", check_location)
    trigger = training_output.TrainingOutputTrigger(location=str(tmp_path), poke_interval=0.01, deadline=2e9)

    async def collect():
        return [event async for event in trigger.run()]

    (event,) = asyncio.run(asyncio.wait_for(collect(), 10))
    expected = "bad_input" if cls in _BAD_INPUT_ERRORS else "error"
    assert event.payload["status"] == expected


@pytest.mark.parametrize("cls", _BAD_INPUT_ERRORS, ids=lambda c: c.__name__)
def test_the_sensor_fails_now_on_bad_input(cls, monkeypatch, tmp_path) -> None:
    from airflow_metric_gate.sensors import training_output
    from airflow_metric_gate.sensors.training_output import TrainingOutputSensor

    error = sample(cls)

    def check_location(*args, **kwargs):
        raise error

    monkeypatch.setattr(training_output, "check_location", check_location)
    sensor = TrainingOutputSensor(task_id="wait_for_record", path=str(tmp_path), poke_interval=0.01, timeout=1)
    with pytest.raises(AirflowFailException) as err:
        sensor.poke({})
    assert err.value.__cause__ is error
