"""The broker fixtures live with the broker tests; the journal reads the same broker."""

from tests.broker.conftest import behaviour, broker, vhost  # noqa: F401 - fixtures, imported to register them here
