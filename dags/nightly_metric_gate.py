"""The nightly metric gate DAG shipped inside the package, offered to this DAGs folder.

The DAG is defined once, in ``airflow_metric_gate/example_dags/nightly_metric_gate.py`` (what
``metric-gate demo`` runs); this file runs that file, so the DAG processor finds the DAG here and
the two can never differ.  Its relative ``gates_file`` param starts at this file's folder, which
holds the same gates file as the package (``gates/nightly_metric_gate.yaml``).
"""

import importlib.util
from pathlib import Path

import airflow_metric_gate.example_dags

# Run afresh at every parse rather than imported once: a process that parses this folder several
# times (a test calling dag.test() night after night) gets a new DAG each time, as from any DAG file.
PACKAGED = Path(airflow_metric_gate.example_dags.__file__).with_name("nightly_metric_gate.py")
_spec = importlib.util.spec_from_file_location("airflow_metric_gate_example_nightly", PACKAGED)
_module = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_module)
dag = _module.dag
