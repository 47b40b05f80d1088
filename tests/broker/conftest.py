"""Broker fixtures: one private RabbitMQ for the session (scripts/rabbitmq.sh), a fresh vhost per test."""

from __future__ import annotations

import os
import shutil
import subprocess
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote

import pytest
import requests

from airflow_rbak.broker.connection import RabbitMQConnection

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "scripts" / "rabbitmq.sh"


@dataclass(frozen=True)
class Broker:
    """The session's broker: its connection settings and a way to stop and start it (data kept)."""

    connection: RabbitMQConnection

    def stop(self) -> None:
        subprocess.run([str(SCRIPT), "stop"], check=True, capture_output=True, env=_env())

    def start(self) -> None:
        subprocess.run([str(SCRIPT), "start"], check=True, capture_output=True, env=_env())

    def eval(self, expression: str) -> str:
        """Evaluate an Erlang expression on the private node (``rabbitmqctl eval``): test-only broker settings."""
        node = os.environ.get("RBAK_RABBIT_NODE", "rabbit@localhost")
        done = subprocess.run(["rabbitmqctl", "-n", node, "eval", expression], check=True, capture_output=True, text=True,
                              timeout=60)
        return done.stdout.strip()

    def api(self, method: str, path: str, **kwargs: object) -> requests.Response:
        c = self.connection
        response = requests.request(method, f"{c.management_base_url}/api/{path}", auth=(c.username, c.password), timeout=30, **kwargs)
        response.raise_for_status()
        return response


def _env() -> dict[str, str]:
    return dict(os.environ)


@pytest.fixture(scope="session")
def broker() -> Iterator[Broker]:
    """Start (or reuse) the private node; set RBAK_TEST_AMQP_URL to use an external broker instead."""
    url = os.environ.get("RBAK_TEST_AMQP_URL")
    if url:
        yield Broker(RabbitMQConnection.from_url(url))
        return
    if shutil.which("rabbitmq-server") is None or os.geteuid() != 0:
        pytest.skip("broker tests need rabbitmq-server and root (see scripts/rabbitmq.sh)")
    subprocess.run([str(SCRIPT), "start"], check=True, capture_output=True, env=_env())
    yield Broker(
        RabbitMQConnection(
            amqp_port=int(os.environ.get("RBAK_AMQP_PORT", 5672)),
            management_port=int(os.environ.get("RBAK_MGMT_PORT", 15672)),
            stream_port=int(os.environ.get("RBAK_STREAM_PORT", 5552)),
        )
    )


@pytest.fixture
def vhost(broker: Broker) -> Iterator[str]:
    """A vhost of its own for one test, deleted afterwards."""
    name = f"t-{uuid.uuid4().hex[:10]}"
    broker.api("PUT", f"vhosts/{quote(name, safe='')}")
    broker.api(
        "PUT",
        f"permissions/{quote(name, safe='')}/{quote(broker.connection.username, safe='')}",
        json={"configure": ".*", "write": ".*", "read": ".*"},
    )
    yield name
    try:
        broker.api("DELETE", f"vhosts/{quote(name, safe='')}")
    except requests.RequestException:
        pass
