"""The gate as four Airflow operators: ingest, select, persist, evaluate."""
