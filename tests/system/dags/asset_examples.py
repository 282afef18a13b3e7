"""The producer, gate and consumer example Airflow DAGs (examples/assets_*.py), records in the test's folder.

Each example file runs afresh here; only the ``record_root`` param of the producer and the gate
changes, to the folder the system test gives in ``METRIC_GATE_SYSTEM_ASSET_RECORDS``.
"""

import importlib.util
import os
from pathlib import Path

EXAMPLES = Path(__file__).resolve().parents[3] / "examples"
RECORDS = os.environ.get("METRIC_GATE_SYSTEM_ASSET_RECORDS", "/tmp/metric-gate-asset-records")


def _load(name):
    spec = importlib.util.spec_from_file_location(f"metric_gate_system_{name}", EXAMPLES / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.dag


assets_training_job = _load("assets_producer")
assets_metric_gate = _load("assets_gate")
assets_promote_checkpoint = _load("assets_consumer")
for _dag in (assets_training_job, assets_metric_gate):
    # each task took its own copy of the DAG's params when it was built: change them all
    for _params in (_dag.params, *(t.params for t in _dag.tasks)):
        if "record_root" in _params:
            _params["record_root"] = RECORDS
