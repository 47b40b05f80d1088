"""The connection's "Test" button against a real broker: it names the endpoint or the right that fails."""

from __future__ import annotations

import json
import socket
import uuid
from urllib.parse import quote

import pytest

from airflow_rbak.hooks.rabbitmq import RabbitMQHook
from tests.broker.conftest import broker, vhost  # noqa: F401 - fixtures

PASSWORD = "Conn-Test-Pw/1"


def free_port() -> int:
    """A loopback port nothing listens on (bound, then released)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def test_button(monkeypatch, broker):  # noqa: F811
    """Define ``rabbitmq_default`` as the broker with some fields changed, then press "Test"."""

    def press(vhost: str = "/", **changes: object) -> tuple[bool, str]:
        c = broker.connection
        fields = {"host": c.host, "port": c.amqp_port, "login": c.username, "password": c.password, "schema": vhost,
                  "management_port": c.management_port, "stream_port": c.stream_port, **changes}
        extra = {k: fields.pop(k) for k in ("management_port", "stream_port")} | {"timeout": 5}
        monkeypatch.setenv("AIRFLOW_CONN_RABBITMQ_DEFAULT", json.dumps({"conn_type": "rabbitmq", **fields, "extra": extra}))
        return RabbitMQHook().test_connection()

    return press


@pytest.fixture
def user(broker, vhost):  # noqa: F811
    """A user with full permissions on the test's vhost and the tags each test gives it."""
    name = f"conn-test-{uuid.uuid4().hex[:6]}"

    def make(tags: str) -> str:
        broker.api("PUT", f"users/{name}", json={"password": PASSWORD, "tags": tags})
        broker.api("PUT", f"permissions/{quote(vhost, safe='')}/{name}", json={"configure": ".*", "write": ".*", "read": ".*"})
        return name

    yield make
    broker.api("DELETE", f"users/{name}")


@pytest.mark.broker
def test_a_good_connection_passes_every_check(test_button, vhost):  # noqa: F811
    ok, message = test_button(vhost)

    assert ok, message
    for name in ("management API", "AMQP", "stream", "can list queues", "can back up queues", "can publish into",
                 "can declare queues", "can export definitions: yes", "can import definitions and create vhosts: yes"):
        assert f"{name}" in message
    assert "RabbitMQ 3." in message


@pytest.mark.broker
def test_a_wrong_amqp_port_is_named_and_the_other_endpoints_pass(test_button, vhost):  # noqa: F811
    port = free_port()
    ok, message = test_button(vhost, port=port)

    assert not ok
    assert message.startswith(f"AMQP 127.0.0.1:{port}: FAILED (cannot connect")
    assert "stream" not in message.split(". Passed:")[0] and "stream 127.0.0.1" in message.split(". Passed:")[1]


@pytest.mark.broker
def test_a_wrong_stream_port_is_named(test_button, vhost):  # noqa: F811
    port = free_port()
    ok, message = test_button(vhost, stream_port=port)

    assert not ok
    assert message.startswith(f"stream 127.0.0.1:{port}: FAILED (stream port 127.0.0.1:{port} unreachable")
    assert "AMQP 127.0.0.1" in message.split(". Passed:")[1]


@pytest.mark.broker
def test_a_user_without_the_administrator_tag_passes_and_is_told_it_cannot_export_definitions(test_button, user, vhost):  # noqa: F811
    name = user("management")

    ok, message = test_button(vhost, login=name, password=PASSWORD)

    assert ok, message
    assert (f"can export definitions: no (needs the 'administrator' tag; user {name!r} has tags ['management']: "
            "back up with include_definitions false)") in message
    assert f"can back up queues in vhost {vhost!r}: yes" in message
    assert PASSWORD not in message


@pytest.mark.broker
def test_a_user_without_any_tag_cannot_use_the_management_api_and_is_told_why(test_button, user, vhost):  # noqa: F811
    name = user("")

    ok, message = test_button(vhost, login=name, password=PASSWORD)

    assert not ok
    assert "management API http://127.0.0.1" in message and "HTTP 401: Not management user" in message
    assert "a tag that opens the management API ('management'" in message
    assert "AMQP 127.0.0.1" in message.split(". Passed:")[1]  # the user may still log in over AMQP
