#!/usr/bin/env bash
# Runs once, when the Postgres volume is first initialised: one server, two databases.
#   airflow      Airflow's metadata database, owned by the role "airflow"
#   metric_gate  the metric store (tables runs, metric_values), owned by the role "metric_gate"
# Passwords come from the postgres service's environment (see .env.example).
set -euo pipefail

: "${AIRFLOW_DB_PASSWORD:?set AIRFLOW_DB_PASSWORD}"
: "${METRIC_GATE_DB_PASSWORD:?set METRIC_GATE_DB_PASSWORD}"

psql -v ON_ERROR_STOP=1 --username "$POSTGRES_USER" --dbname postgres \
    -v airflow_password="$AIRFLOW_DB_PASSWORD" \
    -v metric_gate_password="$METRIC_GATE_DB_PASSWORD" <<'SQL'
CREATE ROLE airflow LOGIN PASSWORD :'airflow_password';
CREATE DATABASE airflow OWNER airflow;
CREATE ROLE metric_gate LOGIN PASSWORD :'metric_gate_password';
CREATE DATABASE metric_gate OWNER metric_gate;
SQL
