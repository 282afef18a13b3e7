"""The log formats' libraries are optional: nothing loads them until a record of their format is read."""

from __future__ import annotations

import json
import subprocess
import sys

OPTIONAL = ("mlflow", "crc32c", "google.protobuf", "tensorboardX", "tensorboard")


def test_reading_a_json_lines_record_loads_no_optional_library(tmp_path):
    record = tmp_path / "night.jsonl"
    record.write_text(json.dumps({"metric": "m", "series": [[0, 1.0]]}) + "\n")
    probe = (
        "import json, sys\n"
        "from airflow_metric_gate.records import read_record\n"
        "import airflow_metric_gate.formats.tensorboard, airflow_metric_gate.formats.mlflow_run\n"
        "import airflow_metric_gate.formats.csv_log, airflow_metric_gate.readiness\n"
        f"read_record({str(record)!r})\n"
        f"print(json.dumps(sorted(m for m in sys.modules if m.split('.')[0] in {OPTIONAL!r} or m in {OPTIONAL!r})))\n"
    )
    proc = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout.strip().splitlines()[-1]) == []


def test_a_missing_extra_is_bad_input_saying_what_to_install(tmp_path):
    record = tmp_path / "events.out.tfevents.1.host"
    record.write_bytes(b"")
    probe = (
        "import sys\n"
        "sys.modules['crc32c'] = None  # as if the extra were not installed\n"
        "from airflow_metric_gate.records import RecordError, read_record\n"
        "try:\n"
        f"    read_record({str(record)!r}, format='tensorboard')\n"
        "except RecordError as err:\n"
        "    print(err)\n"
    )
    proc = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 0, proc.stderr
    assert "pip install 'airflow-metric-gate[tensorboard]'" in proc.stdout


def test_a_missing_mlflow_extra_is_bad_input_saying_what_to_install():
    probe = (
        "import sys\n"
        "sys.modules['mlflow'] = None  # as if the extra were not installed\n"
        "from airflow_metric_gate.records import RecordError, read_record\n"
        "try:\n"
        "    read_record('runs:/abc?tracking_uri=http://127.0.0.1:9', format='mlflow')\n"
        "except RecordError as err:\n"
        "    print(err)\n"
    )
    proc = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 0, proc.stderr
    assert "pip install 'airflow-metric-gate[mlflow]'" in proc.stdout
