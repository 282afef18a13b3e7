"""What a night says to data lineage (OpenLineage): one assertion per declaration, and the store's datasets.

No Airflow and no OpenLineage here: :mod:`airflow_metric_gate.operators.lineage` turns these plain
values into the OpenLineage provider's facets.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from airflow_metric_gate.enums import ERROR, FAIL

#: The store's table of judged values: the evaluate task's output dataset.
VALUES_TABLE = "metric_values"


@dataclass(frozen=True)
class DeclarationAssertion:
    """One declaration's outcome as a data-quality assertion.

    :param name: the declaration, e.g. ``rollout/raw_reward (steps "all")``.
    :param success: whether it held tonight (no FAIL and no ERROR, warnings included).
    :param column: the metric the declaration gates.
    :param severity: ``error``, or ``warn`` for a declaration of ``severity: warn`` (never blocks).
    :param actual: what failed, e.g. ``3 FAIL, 0 ERROR`` (``None`` when it held).
    :param constraint: the declaration's constraint key.
    """

    name: str
    success: bool
    column: str
    severity: str
    actual: str | None
    constraint: str

    #: What every declaration asserts.
    assertion = "within_band"


def declaration_assertions(verdict: Mapping, declarations: Iterable[Mapping]) -> list[DeclarationAssertion]:
    """Return one assertion per declaration of the run, in declaration order.

    A declaration fails its assertion when any of its results is FAIL or ERROR (the verdict's
    ``summary`` lists exactly those declarations), whether or not it blocks.

    :param verdict: the night's verdict.
    :param declarations: the run's declarations (``metric_key``, ``steps_key``, ``constraint_key``);
        those named only by the verdict are added after them.
    """
    failing: dict[tuple[str, str, str], Mapping] = {}
    for e in verdict.get("summary") or ():
        counts = e.get("counts") or {}
        if counts.get(FAIL) or counts.get(ERROR):
            failing[(e["metric_key"], e["steps_key"], e["constraint_key"])] = e
    keys = [(d["metric_key"], d["steps_key"], d["constraint_key"]) for d in declarations]
    keys += sorted(set(failing) - set(keys))
    out = []
    for m, s, c in dict.fromkeys(keys):
        entry = failing.get((m, s, c))
        counts = (entry or {}).get("counts") or {}
        out.append(DeclarationAssertion(
            name=f"{m} (steps {s})", success=entry is None, column=m,
            severity="warn" if (entry or {}).get("severity") == "warn" else "error",
            actual=None if entry is None else f"{counts.get(FAIL, 0)} FAIL, {counts.get(ERROR, 0)} ERROR",
            constraint=c,
        ))
    return out


def store_dataset(dialect: str, *, database: str, host: str | None = None, port: int | None = None,
                  table: str = VALUES_TABLE) -> tuple[str, str]:
    """Return the OpenLineage ``(namespace, name)`` of a store table (never a login or password).

    Postgres follows OpenLineage's naming: ``postgres://host:port`` and ``database.schema.table``
    (schema ``public``); a SQLite store is ``sqlite://<file>`` and ``main.<table>``.

    :param dialect: ``postgres`` or ``sqlite``.
    :param database: the database name (Postgres) or the database file (SQLite).
    :param host: the Postgres host.
    :param port: the Postgres port (default 5432).
    :param table: the table.
    """
    if dialect == "sqlite":
        return f"sqlite://{database}", f"main.{table}"
    return f"postgres://{host or 'localhost'}:{port or 5432}", f"{database}.public.{table}"


__all__ = ["VALUES_TABLE", "DeclarationAssertion", "declaration_assertions", "store_dataset"]
