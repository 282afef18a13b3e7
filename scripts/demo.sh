#!/usr/bin/env bash
# Install the package into .venv and run the end-to-end demo on the embedded SQLite store.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
[ -x .venv/bin/python ] || "$PYTHON" -m venv .venv
echo "demo: installing airflow-metric-gate and Apache Airflow into .venv (first run takes a few minutes)"
.venv/bin/python -m pip install --quiet --upgrade pip
.venv/bin/python -m pip install --quiet -e .
exec .venv/bin/metric-gate demo "$@"
