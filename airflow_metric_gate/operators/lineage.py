"""OpenLineage facets of the evaluate task: the store's table as output, one assertion per declaration.

Needs the OpenLineage provider (extra ``openlineage``); without it the evaluate task reports no
lineage and runs as before.  The facets follow what the common SQL check operators report: a
``dataQualityAssertions`` facet on the checked dataset, one assertion per check.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from airflow_metric_gate.lineage import declaration_assertions, store_dataset


def operator_lineage(verdict: Mapping, declarations: Iterable[Mapping], location: Mapping[str, Any]) -> Any:
    """Return the ``OperatorLineage`` of one night: ``metric_values`` as the output dataset, with its assertions.

    :param verdict: the night's verdict.
    :param declarations: the run's declarations (``metric_key``, ``steps_key``, ``constraint_key``).
    :param location: where the store is (:meth:`MetricStoreHook.store_location`).
    """
    from airflow.providers.common.compat.openlineage.facet import OutputDataset
    from airflow.providers.openlineage.extractors import OperatorLineage
    from openlineage.client.facet_v2 import DatasetFacet
    from openlineage.client.facet_v2 import data_quality_assertions_dataset as dq

    namespace, name = store_dataset(**location)
    assertions = [
        dq.Assertion(assertion=a.assertion, success=a.success, column=a.column, severity=a.severity, name=a.name,
                  description=f"every step of {a.name} within its band {a.constraint}", actual=a.actual)
        for a in declaration_assertions(verdict, declarations)
    ]
    # OpenLineage types this facet as an input dataset's; it is kept on the output dataset the gate
    # writes, where lineage consumers read it (see docs/airflow/lineage.md)
    facets: dict[str, DatasetFacet] = {
        "dataQualityAssertions": dq.DataQualityAssertionsDatasetFacet(assertions=assertions),  # type: ignore[dict-item]  # see above
    }
    return OperatorLineage(outputs=[OutputDataset(namespace=namespace, name=name, facets=facets)])


__all__ = ["operator_lineage"]
