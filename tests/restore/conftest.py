"""Restore tests use the broker tests' session broker and per-test vhosts."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.broker.conftest import (  # noqa: F401 - fixtures, imported to register them here
    behaviour,
    broker,
    broker_310,
    second_broker,
    vhost,
    vhost_of_its_own,
)
from tests.restore.helpers import declare


@pytest.fixture
def target_vhost(broker) -> Iterator[str]:  # noqa: F811 - the imported fixture
    """The name of a vhost that does not exist yet (a restore creates it); deleted afterwards."""
    with vhost_of_its_own(broker, "r", create=False) as name:
        yield name


@pytest.fixture
def bystander(broker) -> Iterator[str]:  # noqa: F811 - the imported fixture
    """Another vhost on the source, with a queue and an exchange, that no backup here asks for; deleted afterwards."""
    with vhost_of_its_own(broker) as name:
        declare(broker.connection, name, {"bystander": "classic"})
        yield name
