#!/usr/bin/env bash
# Install the package into .venv and run the end-to-end demo on the embedded SQLite store.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
[ -x .venv/bin/python ] || "$PYTHON" -m venv .venv
echo "demo: installing airflow-metric-gate and Apache Airflow into .venv (first run takes a few minutes)"
log=.venv/install.log
if ! { .venv/bin/python -m pip install --quiet --upgrade pip && .venv/bin/python -m pip install --quiet -e .; } >"$log" 2>&1; then
    cat "$log" >&2
    echo "demo: installation failed (output above, also in $log)" >&2
    exit 1
fi
exec .venv/bin/metric-gate demo "$@"
