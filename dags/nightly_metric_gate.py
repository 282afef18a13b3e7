"""The nightly metric gate DAG shipped inside the package, offered to this DAGs folder.

The DAG is defined once, in ``airflow_metric_gate/example_dags/nightly_metric_gate.py`` (what
``metric-gate demo`` runs); importing it here makes the DAG processor find it in this folder,
and the two can never differ.  Its relative ``gates_file`` param starts at this file's folder,
which holds the same gates file as the package (``gates/nightly_metric_gate.yaml``).
"""

from airflow_metric_gate.example_dags.nightly_metric_gate import dag

__all__ = ["dag"]
