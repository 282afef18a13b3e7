"""The options of evaluate: which history judges a run and what its verdict lists.

:func:`~airflow_metric_gate.pipeline.evaluate`, :func:`~airflow_metric_gate.pipeline.run_gate`
and the Python API's ``run_gate`` take them as one :class:`EvaluateOptions` (``options=``) or,
as before, one keyword each.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any

from airflow_metric_gate.enums import Aggregate
from airflow_metric_gate.evaluation import DEFAULT_HISTORY_LIMIT, DEFAULT_MIN_HISTORY
from airflow_metric_gate.limits import history_limit_problem
from airflow_metric_gate.store import StoreInputError
from airflow_metric_gate.verdict import DEFAULT_MAX_RESULTS


@dataclass(frozen=True)
class EvaluateOptions:
    """How a stored run is judged and what its verdict lists.

    :param history_limit: how many earlier trusted baseline runs form the baseline.
    :param min_history: fewer baseline values make a coordinate INACTIVE.
    :param aggregate: ``mean`` or ``median``.
    :param enforce: make every FAIL or ERROR block (declarations may also enforce themselves);
        ``None``: ``False`` when the evaluation is recorded, else as the run's recorded evaluation was.
    :param all_results: list every result in the verdict, not only FAIL and ERROR.
    :param max_results: at most this many results in the verdict (``None``: no limit).
    :param max_bytes: keep the verdict's JSON below this size (for XCom).
    :param chunk: coordinates read and judged at a time (default
        :func:`~airflow_metric_gate.chunking.chunk_points`); the verdict does not depend on it.

    See also :func:`evaluate_options` (the keywords or the object) and :func:`check_evaluate_options`.
    """

    history_limit: int = DEFAULT_HISTORY_LIMIT
    min_history: int = DEFAULT_MIN_HISTORY
    aggregate: str = "mean"
    enforce: bool | None = None
    all_results: bool = False
    max_results: int | None = DEFAULT_MAX_RESULTS
    max_bytes: int | None = None
    chunk: int | None = None

    def check(self) -> None:
        """Refuse an option out of range (see :func:`check_evaluate_options`).

        :raises StoreInputError: an option is out of range.
        """
        check_evaluate_options(history_limit=self.history_limit, min_history=self.min_history,
                               aggregate=self.aggregate)


#: The names of the options, in their documented order.
OPTION_NAMES = tuple(f.name for f in fields(EvaluateOptions))


def evaluate_options(options: EvaluateOptions | None, keywords: Mapping[str, Any], *, caller: str) -> EvaluateOptions:
    """Return the options a call was given: the object, or the keywords one by one (never both).

    :param options: the ``options=`` argument, or ``None``.
    :param keywords: the call's other keyword arguments, each the name of an option.
    :param caller: the function's name, for the messages.
    :raises TypeError: a keyword names no option, both forms were given, or ``options`` is no
        :class:`EvaluateOptions`.
    """
    unknown = [name for name in keywords if name not in OPTION_NAMES]
    if unknown:
        raise TypeError(f"{caller}() got unexpected keyword argument(s) {', '.join(map(repr, unknown))}; "
                        f"its evaluate options are {', '.join(OPTION_NAMES)}")
    if options is None:
        return EvaluateOptions(**keywords)
    if not isinstance(options, EvaluateOptions):
        raise TypeError(f"{caller}(): options must be an EvaluateOptions, not {type(options).__name__}")
    if keywords:
        raise TypeError(f"{caller}(): pass the evaluate options either as options= or as keywords, not both "
                        f"(got options= and {', '.join(keywords)})")
    return options


def check_evaluate_options(
    *, history_limit: int = DEFAULT_HISTORY_LIMIT, min_history: int = DEFAULT_MIN_HISTORY, aggregate: str = "mean",
    **_: Any,
) -> None:
    """Check the options of :func:`~airflow_metric_gate.pipeline.evaluate` (before anything is written).

    :param history_limit: from 1 to :data:`~airflow_metric_gate.limits.MAX_HISTORY_LIMIT`.
    :param min_history: >= 0.
    :param aggregate: ``mean`` or ``median``.
    :raises StoreInputError: an option is out of range.
    """
    problem = Aggregate.problem(aggregate, "aggregate") or history_limit_problem(history_limit)
    if problem:
        raise StoreInputError(problem)
    if type(min_history) is not int or min_history < 0:
        raise StoreInputError(f"min_history must be an integer >= 0, got {min_history!r}")
