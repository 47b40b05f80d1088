"""Airflow's provider entry point for airflow-rbak (named in pyproject's ``apache_airflow_provider``).

Airflow imports this on every start-up, before any DAG: it must stay free of
heavy imports, and it must exist, or ``import airflow`` fails for everyone who
has airflow-rbak installed.
"""

from __future__ import annotations

from typing import Any

from airflow_rbak import __version__


def get_provider_info() -> dict[str, Any]:
    """Describe the provider: its package, its operators and hooks."""
    return {
        "package-name": "airflow-rbak",
        "name": "RBAK (RabbitMQ backup)",
        "description": "Back up and restore RabbitMQ messages and definitions in the RBAK format.",
        "versions": [__version__],
        "operators": [{"integration-name": "RBAK", "python-modules": ["airflow_rbak.operators.spark"]}],
        "hooks": [{"integration-name": "RBAK", "python-modules": ["airflow_rbak.hooks.spark"]}],
    }
