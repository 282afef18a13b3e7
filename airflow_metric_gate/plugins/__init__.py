"""The "Metric gate" view inside the Airflow 3 UI (an Airflow plugin; see ``metric_gate.py``)."""
