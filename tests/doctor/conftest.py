"""Fixtures of the preflight tests: the shared broker (tests/broker/conftest.py) and the session's Airflow home."""

from __future__ import annotations

from tests.broker.conftest import broker, vhost  # noqa: F401 - fixtures, imported to register them here
from tests.dags.conftest import airflow_home  # noqa: F401
