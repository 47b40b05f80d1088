"""Fixtures of the DAG tests: one migrated Airflow home per session, and the shared broker."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.broker.conftest import broker, vhost  # noqa: F401 - fixtures, imported to register them here
from tests.dags.airflow_env import VENV_BIN, airflow_env, run
from tests.reliability.secrets import create_user


@pytest.fixture(scope="session")
def airflow_home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An AIRFLOW_HOME with a migrated SQLite database (``airflow db migrate`` once, about 5 s)."""
    home = tmp_path_factory.mktemp("airflow-home")
    done = run([str(VENV_BIN / "airflow"), "db", "migrate"], airflow_env(home), timeout=300)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    return home


@pytest.fixture
def secret_user(broker, vhost):  # noqa: F811 - the imported fixtures
    """A broker user with a distinctive password (and so a distinctive hash) for the DAG runs, which the
    tests then search for in logs, XCom, reports and storage (tests/reliability/secrets.py)."""
    user = create_user(broker, vhost)
    yield user
    broker.api("DELETE", f"users/{user.name}")


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "spark: runs real spark-submit jobs (about 10 s of JVM start-up each)")
