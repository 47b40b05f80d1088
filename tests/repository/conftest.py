"""The broker fixtures live with the broker tests; chains are made by backup runs on the same broker."""

from tests.broker.conftest import broker, vhost  # noqa: F401 - fixtures, imported to register them here
