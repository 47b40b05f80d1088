"""The target's ``max_message_size`` as a restore reads it: announced by a 4.x node over AMQP 1.0; a 3.10 node (no
AMQP 1.0 without its plugin) is taken at its version's default, and the reading says so."""

from __future__ import annotations

import pytest

from airflow_rbak.broker.discovery import parse_version
from airflow_rbak.broker.message_size_limit import DEFAULT_BEFORE_4, DEFAULT_FROM_4, message_size_limit
from tests.broker.behaviour import Behaviour

pytestmark = pytest.mark.broker


def test_the_limit_is_the_nodes_own_on_4_x_and_the_versions_default_on_3_10(broker, vhost, behaviour: Behaviour):
    limit = message_size_limit(broker.connection, vhost, parse_version(broker.version))

    if behaviour.announces_max_message_size():
        assert limit.max_bytes == DEFAULT_FROM_4 and "AMQP 1.0 attach" in limit.source
    else:
        assert limit.max_bytes == DEFAULT_BEFORE_4 and "the default of RabbitMQ 3." in limit.source
