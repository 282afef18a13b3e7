"""What the four operators share: the store's connection and hook, and what retries versus fails now.

Every error of the core reaches Airflow through :meth:`MetricGateBaseOperator.core_errors`; its fate
is its kind's (:func:`airflow_metric_gate.errors.error_fate`, which the CLI's exit status reads too):

==============================================================  ==========================================
core error                                                      Airflow
==============================================================  ==========================================
bad input (``BadInputError``): ``StoreInputError``,             ``AirflowFailException``: the task fails at
``DeclarationError``, ``RecordError``, ``RecordChanged``, ...   once, never retried (fix the input, clear)
unavailable (``UnavailableError``): ``StoreUnavailable``        ``AirflowException``: retried
(``EarlierRunsPending`` too), ``StoreFailure``,
``StorageUnavailable``
==============================================================  ==========================================

Messages name the task and never carry a password (the store and the hook hide it; the text is
scrubbed once more here).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from functools import cached_property
from typing import Any

from airflow.sdk import BaseOperator
from airflow.sdk.exceptions import AirflowException, AirflowFailException

from airflow_metric_gate.declarations import DeclarationError
from airflow_metric_gate.errors import error_fate
from airflow_metric_gate.hooks.metric_store import MetricStoreHook
from airflow_metric_gate.printable import printable
from airflow_metric_gate.records import RecordError
from airflow_metric_gate.store import MetricStore, StoreError, StoreUnavailable
from airflow_metric_gate.store.urls import scrub


def _retry_note(retries: int | None) -> str:
    """Say what happens to a task failing on an outage, given its ``retries``."""
    if retries is not None and retries <= 0:
        return "not retried (the task has retries=0): clear it to try again"
    return "will retry"


def airflow_error(
    err: BaseException, task_id: str, *, record: str | None = None, retries: int | None = None
) -> AirflowException | None:
    """Return the Airflow exception a core error becomes, or ``None`` for an error that is not the core's.

    :param err: the error the core raised.
    :param task_id: names the task in the message.
    :param record: the record location, named in the message of a bad record.
    :param retries: the task's ``retries``: an outage's message says "will retry" only when it has some.
    """
    fate = error_fate(err)
    if fate is None:
        return None
    text = printable(scrub(str(err)))
    if not fate.retry:
        if isinstance(err, RecordError):
            where = f" {printable(record)}" if record else ""
            return AirflowFailException(f"{task_id}: bad training record{where}: {text}")
        if isinstance(err, DeclarationError):
            return AirflowFailException(f"{task_id}: invalid gate declarations: {text}")
        return AirflowFailException(f"{task_id}: {text}")
    retry = _retry_note(retries)
    if isinstance(err, StoreUnavailable):
        return AirflowException(f"{task_id}: metric store unavailable, {retry}: {text}")
    if isinstance(err, StoreError):
        return AirflowException(f"{task_id}: metric store error, {retry}: {text}")
    return AirflowException(f"{task_id}: {text}; {retry}")


class MetricGateBaseOperator(BaseOperator):
    """The base of the metric gate's operators.

    :param conn_id: the Airflow connection of the metric store (type ``metric_gate``, or
        ``postgres``; ``sqlite`` for local trials); ``None`` uses the ``[metric_gate] conn_id``
        option, default ``metric_gate_db`` (templated in the operators that use the store).
    :param kwargs: passed to :class:`~airflow.sdk.BaseOperator`.
    """

    def __init__(self, *, conn_id: str | None = None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.conn_id = conn_id

    @cached_property
    def hook(self) -> MetricStoreHook:
        """The store's hook, built at run time once ``conn_id`` is rendered."""
        return MetricStoreHook(metric_gate_conn_id=self.conn_id)

    def bad_input(self, message: str) -> AirflowFailException:
        """Return the exception failing this task at once, for input no retry can fix.

        :param message: what is wrong and how to fix it.
        """
        return AirflowFailException(printable(f"{self.task_id}: {message}"))

    @contextmanager
    def core_errors(self, *, record: str | None = None) -> Iterator[None]:
        """Turn the core's errors into Airflow's: bad input fails now, an outage retries.

        Either way a store transaction was rolled back first, so nothing stored is lost or half-written.

        :param record: the record location, named in the message of a bad record.
        """
        try:
            yield
        except AirflowException:
            raise
        except Exception as err:
            converted = airflow_error(err, self.task_id, record=record, retries=self.retries)
            if converted is None:
                raise
            raise converted from (err if scrub(str(err)) == " ".join(str(err).split()) else None)

    @contextmanager
    def store(self) -> Iterator[MetricStore]:
        """Open the store through the hook, with :meth:`core_errors` around its use; close it after."""
        with self.core_errors():
            with self.hook.get_store() as store:
                yield store
