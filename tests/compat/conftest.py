"""The compatibility tests restore onto the broker tests' session broker."""

from __future__ import annotations

from tests.broker.conftest import broker  # noqa: F401 - the fixture, imported to register it here
