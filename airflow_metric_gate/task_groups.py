"""The whole gate of one series identity as one task group: ``metric_gate(series=..., path=...)``.

:func:`metric_gate` builds the five tasks of the nightly gate, wired as
``wait_for_record >> ingest_record >> select_steps >> persist_values >> evaluate_gate``, inside a
task group (group id ``metric_gate`` unless overridden), for one series identity.  It is
Airflow's public ``@task_group`` factory with the same methods, so the same call maps over
several series::

    metric_gate(series="rl-finetune", path="/data/nightly/{{ ds }}", gates_file="gates/nightly.yaml")

    metric_gate.partial(gates_file="gates/nightly.yaml").expand_kwargs(
        [{"series": "rl-7b", "path": ".../rl-7b/{{ ds }}"}, {"series": "rl-70b", "path": ...}]
    )

Only Airflow's public interface is used: before mapping, each series' dict is completed with the
defaults of what it leaves out (a literal list when the DAG is parsed, an upstream task's list at
run time through ``XComArg.map()``), and a non-templated argument named in one is refused.

This module imports Airflow; ``import airflow_metric_gate`` does not load it until
``airflow_metric_gate.metric_gate`` is first used.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping, Sequence
from datetime import timedelta
from typing import Any, Generic, ParamSpec

from airflow.sdk import TaskGroup, XComArg, get_current_context, task_group
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


P = ParamSpec("P")


def _result_of(task: Any) -> Any:
    """Return an upstream task's result as a downstream operator's argument.

    It is an ``XComArg`` when the DAG is parsed, which Airflow replaces by the task's XCom value
    before ``execute``: typed ``Any`` so that it fits the value's type that the argument declares.

    :param task: the upstream operator.
    """
    return task.output


# Shown in the Airflow UI (otherwise the function's docstring, written for Python readers).
TOOLTIP = "Metric gate: wait for the night's record, ingest, select, persist, evaluate"
DOC_MD = (
    "Gate of one series identity: `wait_for_record` waits for the night's record, `ingest_record` "
    "reads it, `select_steps` picks the steps of each declaration, `persist_values` stores them and "
    "`evaluate_gate` judges them against the series' history (its XCom `return_value` is the verdict)."
)


def _gate(
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
    a = locals()
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
_DEFAULTS: dict[str, Any] = {
    name: None if p.default is inspect.Parameter.empty else p.default
    for name, p in inspect.signature(_gate).parameters.items()
}


def _refusal(name: str, partial: Mapping[str, Any]) -> str | None:
    """Return why a series' dict may not name ``name``, or ``None`` when it may.

    :param name: a key of the dict.
    :param partial: the arguments given to ``partial()``.
    """
    if name in _FIXED:
        return (f"{name!r}, which is the same for every series and cannot come from the dicts expand_kwargs() "
                "maps over (it would be ignored); give it to .partial()")
    if name in partial:
        return f"{name!r}, which .partial() gives already; name it in one place"
    if name not in _DEFAULTS:
        return f"{name!r}, which is not an argument of metric_gate"
    return None


def _who(series: Mapping[str, Any]) -> str:
    """Name a series' dict in an error: by its series and, in a task, its map index.

    :param series: the dict.
    """
    who = f"the dict of series {series.get('series')!r}"
    try:
        map_index = get_current_context()["ti"].map_index
    except RuntimeError:  # not in a task: the DAG is being parsed, or a test renders a field
        return who
    return f"{who} (map index {map_index})"


class _SeriesDicts:
    """Completes each series' dict with the defaults of what it leaves out, refusing what it may not name.

    Airflow's ``expand_kwargs()`` on a task group stands in a mapped argument for every parameter
    not given to ``partial()``, and resolving one that a dict leaves out fails the task.  Each dict
    is therefore completed before Airflow maps over it: a literal list when the DAG is parsed, an
    upstream task's list at run time through ``XComArg.map()``.

    :param partial: the arguments given to ``partial()``, with every non-templated one.
    """

    def __init__(self, partial: Mapping[str, Any]) -> None:
        self.partial = dict(partial)

    def complete(self, series: Any) -> dict[str, Any]:
        """Return one series' dict with every templated argument ``partial()`` does not give.

        Called by ``XComArg.map()`` on each dict an upstream task returns, as the mapped tasks render
        their fields: an error is bad input, failing the map index's tasks without retries.

        :param series: one item of the list.
        :raises AirflowFailException: the item is not a dict, or names an argument it may not.
        """
        if not isinstance(series, Mapping):
            raise AirflowFailException(f"metric_gate: expand_kwargs() expects dicts, not {type(series).__name__}")
        for name in series:
            if (why := _refusal(name, self.partial)) is not None:
                raise AirflowFailException(f"metric_gate: {_who(series)} names {why}")
        return self._filled(series)

    def completed(self, dicts: Sequence[Any]) -> list[dict[str, Any]]:
        """Return a literal list's dicts completed, when the DAG is parsed.

        :param dicts: the list given to ``expand_kwargs()``.
        :raises TypeError: an item is not a dict (an upstream task returns the whole list, not one
            dict of it), or a dict names an argument it may not.
        """
        completed = []
        for index, series in enumerate(dicts):
            if not isinstance(series, Mapping):
                raise TypeError(
                    f"metric_gate: expand_kwargs() takes a list of dicts or an upstream task's list, and item "
                    f"{index} is a {type(series).__name__}; let one task return the whole list"
                )
            for name in series:
                if name in _FIXED:
                    raise TypeError(f"metric_gate: {name!r} (in the dict of index {index}) is the same for every "
                                    "series; give it to .partial(), not expand_kwargs()")
                if (why := _refusal(name, self.partial)) is not None:
                    raise TypeError(f"metric_gate: the dict of index {index} names {why}")
            completed.append(self._filled(series))
        return completed

    def _filled(self, series: Mapping[str, Any]) -> dict[str, Any]:
        return {name: series.get(name, default) for name, default in _DEFAULTS.items() if name not in self.partial}


def _task_group(node: Any) -> TaskGroup:
    """Return what Airflow's task group factory built: the group, since the function returns nothing.

    :param node: the factory's result.
    """
    if not isinstance(node, TaskGroup):  # pragma: no cover - _gate returns None
        raise TypeError(f"metric_gate built a {type(node).__name__}, not a task group")
    return node


class MetricGateTaskGroup(Generic[P]):
    """The :func:`metric_gate` task group function: call it for one series, map it over several.

    Airflow's public ``@task_group`` factory with the same methods (``override``, ``partial``,
    ``expand``, ``expand_kwargs``), checking the mapping arguments first: a dict given to
    ``expand_kwargs()`` names only what differs per series (the rest gets its default), and a
    non-templated argument (``_FIXED``) is refused there and in ``expand()``.

    :param function: the function that builds the tasks, ``_gate``.
    :param group: keyword arguments of the ``TaskGroup`` (``group_id``, ``tooltip``...).
    :param partial: the arguments given to ``partial()`` so far.
    """

    def __init__(self, function: Callable[P, None], group: Mapping[str, Any],
                 partial: Mapping[str, Any] | None = None) -> None:
        self.function = function
        self.group = dict(group)
        self.partial_kwargs = dict(partial or {})
        self.__doc__ = function.__doc__
        self.__wrapped__ = function  # inspect.signature() shows the function's

    def _factory(self) -> Any:
        return task_group(**self.group)(self.function)

    def __call__(self, *args: P.args, **kwargs: P.kwargs) -> TaskGroup:
        """Build the group for one series.

        :param args: none: every argument is keyword-only.
        :param kwargs: the arguments of :func:`metric_gate`, after those of ``partial()``.
        """
        return _task_group(self._factory()(*args, **{**self.partial_kwargs, **kwargs}))

    def override(self, **kwargs: Any) -> MetricGateTaskGroup[P]:
        """Return the task group function with other ``TaskGroup`` arguments, e.g. ``group_id``.

        :param kwargs: arguments of ``airflow.sdk.TaskGroup``.
        """
        return MetricGateTaskGroup(self.function, {**self.group, **kwargs}, self.partial_kwargs)

    def partial(self, **kwargs: Any) -> MetricGateTaskGroup[P]:
        """Return the task group function with the arguments that are the same for every series.

        :param kwargs: arguments of :func:`metric_gate`.
        :raises TypeError: an argument is not one of :func:`metric_gate`'s, or given twice.
        """
        for name in kwargs:
            if name not in _DEFAULTS:
                raise TypeError(f"metric_gate.partial() got an unexpected argument {name!r}")
            if name in self.partial_kwargs:
                raise TypeError(f"metric_gate.partial() got {name!r} twice")
        return MetricGateTaskGroup(self.function, self.group, {**self.partial_kwargs, **kwargs})

    def expand(self, **kwargs: Any) -> TaskGroup:
        """Map the group over every combination of the lists: one map index per combination.

        :param kwargs: templated arguments of :func:`metric_gate`, each a list or an upstream task's list.
        :raises TypeError: a non-templated argument is mapped; it belongs in ``partial()``.
        """
        for name in kwargs:
            if name in _FIXED:
                raise TypeError(f"metric_gate: {name!r} is the same for every series; give it to .partial(), "
                                "not .expand()")
        factory = self._factory()
        if self.partial_kwargs:
            factory = factory.partial(**self.partial_kwargs)
        return _task_group(factory.expand(**kwargs))

    def expand_kwargs(self, kwargs: Sequence[Mapping[str, Any]] | XComArg) -> TaskGroup:
        """Map the group over series: one map index per dict, each naming what differs for its series.

        :param kwargs: a list of dicts, or an upstream task's output that is one.
        :raises TypeError: a dict of a literal list names a non-templated argument (it belongs in
            ``partial()``), one ``partial()`` gives, or none of :func:`metric_gate`'s.
        """
        fixed = {name: self.partial_kwargs.get(name, _DEFAULTS[name]) for name in _FIXED}
        dicts = _SeriesDicts({**self.partial_kwargs, **fixed})
        if isinstance(kwargs, XComArg):
            mapped: Any = kwargs.map(dicts.complete)
        elif isinstance(kwargs, Sequence) and not isinstance(kwargs, str):
            mapped = dicts.completed(kwargs)
        else:
            raise TypeError(f"metric_gate: expand_kwargs() takes a list of dicts or an upstream task's list, "
                            f"not {type(kwargs).__name__}")
        return _task_group(self._factory().partial(**dicts.partial).expand_kwargs(mapped))


#: Build the gate of one series, or map it over several; see :func:`_gate` for the arguments.
metric_gate = MetricGateTaskGroup(_gate, {"group_id": GROUP_ID, "tooltip": TOOLTIP, "doc_md": DOC_MD})


__all__ = ["GROUP_ID", "MetricGateTaskGroup", "metric_gate"]
