"""Triggers that run in the Airflow triggerer for deferrable sensors."""
