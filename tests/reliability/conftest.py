"""Reliability tests use the broker tests' session broker and per-test vhosts, and the loopback S3 fixtures."""

from tests.broker.conftest import behaviour, broker, vhost  # noqa: F401 - fixtures, imported to register them here
from tests.reliability.secrets import secret_user  # noqa: F401 - a fixture, imported to register it here
