"""Gate four nights of a training job from Python; the fourth night regresses."""

import json
import tempfile
from pathlib import Path

from airflow_metric_gate import load_declarations, run_gate

folder = tempfile.TemporaryDirectory()  # removed at the end, also if the script fails
work = Path(folder.name)
store = f"sqlite:///{work / 'metric_gate.db'}"  # or postgresql://user@host:5432/metrics

# Declarations: a gates file (.yaml, .yml, .json, .py) or a list of mappings.
gates = load_declarations([
    {"metric_key": "eval/accuracy", "steps": "last", "constraint": {"rel_down": 0.05, "rel_up": 0.05}},
])


def write_record(night: str, accuracy: float) -> Path:
    """One night's record: a JSON Lines file, one metric per line."""
    path = work / f"{night}.jsonl"
    line = {"metric": "eval/accuracy", "series": [[100, accuracy - 0.1], [200, accuracy]]}
    path.write_text(json.dumps(line) + "\n")
    return path


nights = {"2026-11-01": 0.80, "2026-11-02": 0.81, "2026-11-03": 0.80, "2026-11-04": 0.70}
for night, accuracy in nights.items():
    verdict = run_gate(
        write_record(night, accuracy), gates,
        series="rl-7b", store=store, role="baseline", logical_date=night, enforce=True, policy="calibrated",
    )
    print(night, "trusted" if verdict.trusted else "NOT trusted", verdict.counts)

print(verdict.report())
assert verdict.blocked and verdict.counts["FAIL"] == 2  # the step, and the night it decides
assert verdict.to_dict()["schema"] == "airflow-metric-gate/verdict/v1"
folder.cleanup()
