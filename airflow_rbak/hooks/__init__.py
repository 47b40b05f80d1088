"""Airflow hooks of airflow-rbak (the only modules besides operators that import Airflow)."""
