"""Restore tests use the broker tests' session broker and per-test vhosts."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from urllib.parse import quote

import pytest
import requests

from tests.broker.conftest import behaviour, broker, broker_310, second_broker, vhost  # noqa: F401 - fixtures, imported to register them here


@pytest.fixture
def target_vhost(broker) -> Iterator[str]:  # noqa: F811 - the imported fixture
    """The name of a vhost that does not exist yet (a restore creates it); deleted afterwards."""
    name = f"r-{uuid.uuid4().hex[:10]}"
    yield name
    try:
        broker.api("DELETE", f"vhosts/{quote(name, safe='')}")
    except requests.RequestException:
        pass
