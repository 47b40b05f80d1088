"""Airflow operators of airflow-rbak: thin wrappers that build a hook, call it, and return a summary."""
