#!/usr/bin/env bash
# Install the package with its test, docs and bench extras into .venv, then lint, type-check, build the docs and
# run every test.
# Each test session creates its own Postgres database and drops it afterwards.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
[ -x .venv/bin/python ] || "$PYTHON" -m venv .venv
.venv/bin/python -m pip install --quiet --upgrade pip
.venv/bin/python -m pip install --quiet -e ".[test,docs,bench]"
.venv/bin/ruff check .
.venv/bin/python -m mypy  # the package, as [tool.mypy] in pyproject.toml says
if [ -f mkdocs.yml ]; then
    NO_MKDOCS_2_WARNING=1 .venv/bin/mkdocs build --strict --quiet --site-dir "$(mktemp -d)"
fi
# Two test processes (METRIC_GATE_TEST_WORKERS=0: one); the tests that start Airflow servers share one of them.
.venv/bin/python -m pytest -n "${METRIC_GATE_TEST_WORKERS:-2}" --dist loadgroup "$@"
