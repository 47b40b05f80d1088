"""Fixtures of the operator tests."""

from __future__ import annotations

import pytest


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "spark: runs real spark-submit jobs (about 10 s of JVM start-up each)")
