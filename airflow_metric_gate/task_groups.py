"""The whole gate of one series identity as one task group: ``metric_gate(series=..., path=...)``.

:func:`metric_gate` builds the five tasks of the nightly gate, wired as
``wait_for_record >> ingest_record >> select_steps >> persist_values >> evaluate_gate``, inside a
task group (group id ``metric_gate`` unless overridden), for one series identity.  It is an
Airflow ``@task_group`` function, so the same call maps over several series::

    metric_gate(series="rl-finetune", path="/data/nightly/{{ ds }}", gates_file="gates/nightly.yaml")

    metric_gate.partial(gates_file="gates/nightly.yaml").expand_kwargs(
        [{"series": "rl-7b", "path": ".../rl-7b/{{ ds }}"}, {"series": "rl-70b", "path": ...}]
    )

This module imports Airflow; ``import airflow_metric_gate`` does not load it until
``airflow_metric_gate.metric_gate`` is first used.
"""

from __future__ import annotations

import inspect
from collections.abc import Mapping, Sequence
from datetime import timedelta
from typing import Any

import attrs
from airflow.sdk import task_group
from airflow.sdk.definitions._internal.expandinput import (
    DictOfListsExpandInput,
    ListOfDictsExpandInput,
    MappedArgument,
)
from airflow.sdk.exceptions import AirflowFailException

from airflow_metric_gate.declarations import GateDeclaration
from airflow_metric_gate.operators.assets import PublishGatedMetricsOperator
from airflow_metric_gate.operators.evaluate import EvaluateGateOperator
from airflow_metric_gate.operators.ingest import IngestRecordOperator
from airflow_metric_gate.operators.persist import PersistValuesOperator
from airflow_metric_gate.operators.select import SelectStepsOperator
from airflow_metric_gate.readiness import DEFAULT_MARKER
from airflow_metric_gate.sensors.training_output import TrainingOutputSensor

GROUP_ID = "metric_gate"
DEFAULT_POKE_INTERVAL = 300.0
DEFAULT_SENSOR_TIMEOUT = timedelta(hours=8).total_seconds()

# Arguments the operators take as plain Python values (not templated): one value for the whole
# group, so under .expand()/.expand_kwargs() they belong in .partial().
_FIXED = ("gates", "enforce", "deferrable", "poke_interval", "timeout", "notifiers", "approval", "gated_asset")


@attrs.define(kw_only=True)
class _MappedOrDefault(MappedArgument):
    """A task-group mapping argument that falls back to the function's default.

    ``expand_kwargs()`` stands in a mapped argument for every parameter of the function, including
    those a series' dict leaves out; resolving one of those would fail the task (``KeyError``).  This
    one resolves to the parameter's default instead, so a dict only names what differs.

    It also refuses a dict that names a non-templated argument (``_FIXED``): the operators took that
    argument's value when the DAG was parsed, so the dict's value would be silently ignored.  Dicts
    from an upstream task are known only at run time, so this is where they are checked.
    """

    _default: Any = None

    def resolve(self, context: Mapping[str, Any]) -> Any:
        data, _ = self._input.resolve(context)
        fixed = [name for name in _FIXED if name in data]
        if fixed:
            raise AirflowFailException(
                f"metric_gate: the dict of map index {context['ti'].map_index} names {fixed[0]!r}, which is the same "
                "for every series and cannot come from the dicts expand_kwargs() maps over (it would be ignored); "
                "give it to .partial()"
            )
        return data.get(self._key, self._default)


def _result_of(task: Any) -> Any:
    """Return an upstream task's result as a downstream operator's argument.

    It is an ``XComArg`` when the DAG is parsed, which Airflow replaces by the task's XCom value
    before ``execute``: typed ``Any`` so that it fits the value's type that the argument declares.

    :param task: the upstream operator.
    """
    return task.output


def _argument(name: str, value: Any) -> Any:
    """Return one argument of :func:`metric_gate` as its operator takes it.

    A templated argument may differ per map index: a stand-in from ``expand_kwargs()`` falls back
    to the parameter's default when a series' dict leaves it out.  A non-templated one (``_FIXED``)
    is the same for every map index.

    :raises TypeError: a non-templated argument is mapped (named in ``expand()``, or a key of a
        literal ``expand_kwargs()`` list); it belongs in ``partial()``.
    """
    if not isinstance(value, MappedArgument):
        return value
    source, default = value._input, _DEFAULTS[name]
    if name not in _FIXED:
        if isinstance(source, ListOfDictsExpandInput):
            return _MappedOrDefault(input=source, key=value._key, default=default)
        return value
    if isinstance(source, DictOfListsExpandInput) or (
        isinstance(source.value, Sequence) and any(isinstance(item, Mapping) and name in item for item in source.value)
    ):
        raise TypeError(f"metric_gate: {name!r} is the same for every series; give it to .partial(), not .expand()")
    # The stand-in expand_kwargs() makes for every parameter; the dicts are not known before the run.
    return default


# Shown in the Airflow UI (otherwise the function's docstring, written for Python readers).
TOOLTIP = "Metric gate: wait for the night's record, ingest, select, persist, evaluate"
DOC_MD = (
    "Gate of one series identity: `wait_for_record` waits for the night's record, `ingest_record` "
    "reads it, `select_steps` picks the steps of each declaration, `persist_values` stores them and "
    "`evaluate_gate` judges them against the series' history (its XCom `return_value` is the verdict)."
)


@task_group(group_id=GROUP_ID, tooltip=TOOLTIP, doc_md=DOC_MD)
def metric_gate(
    *,
    series: str,
    path: str,
    backend: str = "cuda",
    suite: str = "default",
    gates_file: str | None = None,
    gates: Sequence[Mapping[str, Any] | GateDeclaration] | None = None,
    role: str = "auto",
    night: str | None = None,
    conn_id: str | None = None,
    storage_conn_id: str | None = None,
    marker: str | None = DEFAULT_MARKER,
    format: str = "series",
    enforce: bool = True,
    deferrable: bool = True,
    poke_interval: float = DEFAULT_POKE_INTERVAL,
    timeout: float = DEFAULT_SENSOR_TIMEOUT,
    policy: str | None = None,
    notifiers: Sequence[Any] | None = None,
    approval: bool = False,
    gated_asset: Any = None,
) -> None:
    """Gate one series identity's night: wait for its record, ingest, select, persist, evaluate.

    Builds, inside a task group (group id ``metric_gate``; change it with
    ``metric_gate.override(group_id=...)``), the tasks ``wait_for_record`` (a
    :class:`~airflow_metric_gate.sensors.training_output.TrainingOutputSensor`), ``ingest_record``,
    ``select_steps``, ``persist_values`` and ``evaluate_gate``, each handing the next its XCom.

    Templated, and free to differ per series under ``expand()``/``expand_kwargs()`` (a dict that
    leaves one out gets its default): ``series``, ``path``, ``backend``, ``suite``, ``gates_file``,
    ``role``, ``night``, ``conn_id``, ``storage_conn_id``, ``marker``, ``format``, ``policy``.  The same for
    every series
    (give them to ``partial()``): ``gates``, ``enforce``, ``deferrable``, ``poke_interval``,
    ``timeout``, ``notifiers``, ``approval``, ``gated_asset``.

    With ``notifiers``, ``evaluate_gate`` tells on-call: on failure, and on success when the night
    has warnings (``severity: warn``, a level shift, a drift, an untrusted night not enforced).
    With ``approval=True`` an ``approve_night`` task
    (:class:`~airflow_metric_gate.operators.approve.ApproveNightOperator`) follows, asking on-call
    to accept the new level, trust the night or keep it untrusted.  With ``gated_asset`` a
    ``publish_gated_metrics`` task emits that Asset's event on each trusted night.

    :param series: the training series (with ``backend`` and ``suite``, the series identity whose
        history the night is judged against).
    :param path: where the night's record is (folder, file or object-storage URI), e.g.
        ``"/data/nightly/{{ ds }}"``.
    :param backend: hardware backend of the series identity.
    :param suite: schedule or cluster of the series identity.
    :param gates_file: the gates file (YAML, JSON or Python); a relative path starts at the DAG
        file's folder.
    :param gates: declarations written in the DAG file, after those of ``gates_file``; give
        ``gates_file``, ``gates`` or both.
    :param role: ``auto`` (scheduled runs baseline, manual runs shadow), ``baseline`` or ``shadow``.
    :param night: the night (``YYYY-MM-DD``); empty or ``None``: the run's logical date.
    :param conn_id: the metric store's Airflow connection; ``None``: ``[metric_gate] conn_id``.
    :param storage_conn_id: connection of the object storage holding the record, if any.
    :param marker: the file that says the record is complete (``None``: none awaited).
    :param format: the record format: ``series``, ``rows``, ``tensorboard``, ``csv`` or ``mlflow``
        (then ``path`` names the run: ``runs:/<id>`` or ``experiments:/<name>?tag.<key>=<value>``).
    :param enforce: fail ``evaluate_gate`` when a baseline run is not trusted (a regression).
    :param deferrable: wait for the record in the triggerer instead of a worker slot.
    :param poke_interval: seconds between two looks for the record.
    :param timeout: seconds to wait for the record before ``wait_for_record`` fails.
    :param policy: ``reference`` or ``calibrated`` (recommended) for the declarations that set no
        policy of their own, nor their gates file; ``None``: ``reference``.
    :param notifiers: notifiers (``BaseNotifier``, e.g.
        :class:`~airflow_metric_gate.notifications.slack.MetricGateSlackNotifier`) called by
        ``evaluate_gate`` on failure and on success with warnings.
    :param approval: add the ``approve_night`` task after ``evaluate_gate``.
    :param gated_asset: the Asset to emit on a trusted night (e.g.
        :func:`~airflow_metric_gate.operators.assets.gated_metrics_asset`); ``None``: no event.
    """
    a = {name: _argument(name, value) for name, value in locals().items()}
    sensor = TrainingOutputSensor(
        task_id="wait_for_record",
        path=a["path"],
        marker=a["marker"],
        storage_conn_id=a["storage_conn_id"],
        format=a["format"],
        deferrable=a["deferrable"],
        poke_interval=a["poke_interval"],
        timeout=a["timeout"],
    )
    ingest = IngestRecordOperator(
        task_id="ingest_record", location=_result_of(sensor), format=a["format"], storage_conn_id=a["storage_conn_id"]
    )
    select = SelectStepsOperator(
        task_id="select_steps",
        record=_result_of(ingest),
        gates_file=a["gates_file"],
        gates=a["gates"],
        storage_conn_id=a["storage_conn_id"],
        policy=a["policy"],
    )
    persist = PersistValuesOperator(
        task_id="persist_values",
        selection=_result_of(select),
        series=a["series"],
        backend=a["backend"],
        suite=a["suite"],
        role=a["role"],
        night=a["night"],
        conn_id=a["conn_id"],
    )
    callbacks = list(a["notifiers"] or ())
    evaluate = EvaluateGateOperator(
        task_id="evaluate_gate", run=_result_of(persist), conn_id=a["conn_id"], enforce=a["enforce"],
        on_failure_callback=callbacks or None, on_success_callback=callbacks or None,
    )
    if a["approval"]:
        from airflow_metric_gate.operators.approve import ApproveNightOperator

        evaluate >> ApproveNightOperator(
            task_id="approve_night", evaluate_task_id=evaluate.task_id, conn_id=a["conn_id"]
        )
    if a["gated_asset"] is not None:
        PublishGatedMetricsOperator(task_id="publish_gated_metrics", verdict=_result_of(evaluate),
                                    outlets=[a["gated_asset"]])


# Each parameter's default (None for the required series and path, which a task then rejects).
_DEFAULTS = {
    name: None if p.default is inspect.Parameter.empty else p.default
    for name, p in inspect.signature(metric_gate.function).parameters.items()
}


__all__ = ["GROUP_ID", "metric_gate"]
