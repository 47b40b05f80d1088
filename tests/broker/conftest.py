"""Broker fixtures: one private RabbitMQ for the session (scripts/rabbitmq.sh), a fresh vhost per test, and a second
node (another cluster, on other loopback ports) for the tests that restore into two clusters.

The nodes are of the series ``RBAK_RABBITMQ_VERSION`` names (3.10 by default; 4.0 and 4.3 run in chroots): see
``tests/broker/versions.py`` for how a test says which series it expects and what happens when a node of that
series cannot be provisioned."""

from __future__ import annotations

import os
import shutil
import subprocess
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote

import pytest
import requests

from airflow_rbak.broker.connection import RabbitMQConnection
from tests.broker.behaviour import Behaviour
from tests.broker.versions import NODES, session_series, unavailable

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "scripts" / "rabbitmq.sh"


@dataclass(frozen=True)
class Broker:
    """The session's broker: its connection settings and a way to stop and start it (data kept)."""

    connection: RabbitMQConnection
    env: dict[str, str] | None = None
    #: The exact RabbitMQ version the node reports (``4.3.6``), read once it answers.
    version: str = ""

    def stop(self) -> None:
        subprocess.run([str(SCRIPT), "stop"], check=True, capture_output=True, env=self.env or _env())

    def start(self) -> None:
        subprocess.run([str(SCRIPT), "start"], check=True, capture_output=True, env=self.env or _env())

    def eval(self, expression: str) -> str:
        """Evaluate an Erlang expression on the private node (``rabbitmqctl eval``): test-only broker settings."""
        return self.ctl("eval", expression)

    def ctl(self, *args: str, timeout: float = 60) -> str:
        """``rabbitmqctl ARGS`` against the private node, where it runs (a 4.x node's in its chroot)."""
        done = subprocess.run([str(SCRIPT), "ctl", *args], check=True, capture_output=True, text=True, timeout=timeout,
                              env=self.env or _env())
        return done.stdout.strip()

    def api(self, method: str, path: str, **kwargs: object) -> requests.Response:
        c = self.connection
        response = requests.request(method, f"{c.management_base_url}/api/{path}", auth=(c.username, c.password), timeout=30, **kwargs)
        response.raise_for_status()
        return response


def _env() -> dict[str, str]:
    return dict(os.environ)


@contextmanager
def _node_for_session(env: dict[str, str], series: str | None = None) -> Iterator[None]:
    """Start the private node (of the session's series unless ``series`` names another) unless it runs already, and
    stop it at the end only if this session started it, so that ``make test`` leaves no broker behind;
    ``RBAK_KEEP_BROKERS=1`` keeps it for the next run."""
    series = series or session_series()
    if os.geteuid() != 0 or (series == "3.10" and shutil.which("rabbitmq-server") is None):
        unavailable("broker tests need root and, for RabbitMQ 3.10, the host's rabbitmq-server (see scripts/rabbitmq.sh)")
    # A 4.x node's chroot is built here the first time (a minute or two), once for all parts (the script locks).
    provisioned = subprocess.run([str(SCRIPT), "provision"], capture_output=True, text=True, env=env, timeout=1800)
    if provisioned.returncode != 0:
        why = " | ".join(line.strip() for line in provisioned.stderr.strip().splitlines()[-3:])
        unavailable(f"no RabbitMQ {series} node: {why[-800:]}")
    was_running = subprocess.run([str(SCRIPT), "status"], capture_output=True, env=env).returncode == 0
    subprocess.run([str(SCRIPT), "start"], check=True, capture_output=True, env=env)
    try:
        yield
    finally:
        if not was_running and os.environ.get("RBAK_KEEP_BROKERS") != "1":
            subprocess.run([str(SCRIPT), "stop"], capture_output=True, env=env, timeout=180)


@pytest.fixture(scope="session")
def broker() -> Iterator[Broker]:
    """Start (or reuse) the private node; set RBAK_TEST_AMQP_URL to use an external broker instead."""
    url = os.environ.get("RBAK_TEST_AMQP_URL")
    if url:
        yield _recorded(Broker(RabbitMQConnection.from_url(url)))
        return
    with _node_for_session(_env()):
        yield _recorded(Broker(
            RabbitMQConnection(
                amqp_port=int(os.environ.get("RBAK_AMQP_PORT", 5672)),
                management_port=int(os.environ.get("RBAK_MGMT_PORT", 15672)),
                stream_port=int(os.environ.get("RBAK_STREAM_PORT", 5552)),
            )
        ))


def _recorded(broker: Broker) -> Broker:
    """The broker with the exact version its node reports, recorded for the session's report."""
    overview = broker.api("GET", "overview").json()
    NODES[str(overview.get("node", "?"))] = version = str(overview.get("rabbitmq_version", "?"))
    return Broker(broker.connection, broker.env, version)


def second_node_env() -> dict[str, str]:
    """The environment of scripts/rabbitmq.sh for the second node: ``RBAK_*2`` variables, defaults beside the first's."""
    env = _env()
    amqp = int(env.get("RBAK_AMQP_PORT2", 5673))
    env.update({
        "RBAK_AMQP_PORT": str(amqp), "RBAK_MGMT_PORT": env.get("RBAK_MGMT_PORT2", "15673"),
        "RBAK_STREAM_PORT": env.get("RBAK_STREAM_PORT2", "5553"), "RBAK_DIST_PORT": str(amqp + 20000),
        "RBAK_RABBIT_NODE": env.get("RBAK_RABBIT_NODE2", "rabbit2@localhost"),
        "RBAK_RABBIT_DIR": env.get("RBAK_RABBIT_DIR2", str(REPO / ".run" / _folder("rabbitmq2"))),
    })
    return env


def _folder(name: str) -> str:
    """A node folder's default name: a folder keeps its series' data, so 4.x nodes get their own."""
    return name if session_series() == "3.10" else f"{name}-{session_series()}"


@pytest.fixture(scope="session")
def second_broker() -> Iterator[Broker]:
    """A second RabbitMQ node, a cluster of its own, started (or reused) for the session; RBAK_TEST_AMQP_URL2 names an
    external one instead."""
    url = os.environ.get("RBAK_TEST_AMQP_URL2")
    if url:
        yield _recorded(Broker(RabbitMQConnection.from_url(url)))
        return
    env = second_node_env()
    with _node_for_session(env):
        yield _recorded(Broker(RabbitMQConnection(amqp_port=int(env["RBAK_AMQP_PORT"]),
                                                  management_port=int(env["RBAK_MGMT_PORT"]),
                                                  stream_port=int(env["RBAK_STREAM_PORT"])), env))


def node_310_env() -> dict[str, str]:
    """scripts/rabbitmq.sh's environment for a RabbitMQ 3.10 node beside a 4.x session's: ``RBAK_*3`` variables,
    by default the first node's ports + 5 (a part's nodes are 10 apart; TLS takes + 1)."""
    env = _env()
    amqp = int(env.get("RBAK_AMQP_PORT3", int(env.get("RBAK_AMQP_PORT", 5672)) + 5))
    node = env.get("RBAK_RABBIT_NODE", "rabbit@localhost")
    env.update({
        "RBAK_RABBITMQ_VERSION": "3.10", "RBAK_AMQP_PORT": str(amqp),
        "RBAK_MGMT_PORT": env.get("RBAK_MGMT_PORT3", str(int(env.get("RBAK_MGMT_PORT", 15672)) + 5)),
        "RBAK_STREAM_PORT": env.get("RBAK_STREAM_PORT3", str(int(env.get("RBAK_STREAM_PORT", 5552)) + 5)),
        "RBAK_DIST_PORT": str(amqp + 20000), "RBAK_RABBIT_NODE": env.get("RBAK_RABBIT_NODE3", f"rabbit310-{node}"),
        "RBAK_RABBIT_DIR": env.get("RBAK_RABBIT_DIR3", str(REPO / ".run" / f"rabbitmq310-{node.partition('@')[0]}")),
    })
    env.pop("RBAK_EPMD_PORT", None)  # the host's 3.10 nodes share the host's port mapper
    return env


@pytest.fixture(scope="session")
def broker_310(broker: Broker) -> Iterator[Broker]:
    """A RabbitMQ 3.10 node, the source of the upgrade tests: the session's own broker in a 3.10 session, else a
    node of the host's package beside the session's 4.x one (``node_310_env``)."""
    if session_series() == "3.10":
        yield broker
        return
    env = node_310_env()
    with _node_for_session(env, "3.10"):
        yield _recorded(Broker(RabbitMQConnection(amqp_port=int(env["RBAK_AMQP_PORT"]),
                                                  management_port=int(env["RBAK_MGMT_PORT"]),
                                                  stream_port=int(env["RBAK_STREAM_PORT"])), env))


@contextmanager
def vhost_of_its_own(broker: Broker, prefix: str = "t", create: bool = True) -> Iterator[str]:
    """A vhost name no other test uses, created with the broker user's permissions (unless ``create`` is False: the
    name of one a restore creates), and deleted afterwards whatever the test left in it."""
    name = f"{prefix}-{uuid.uuid4().hex[:10]}"
    if create:
        broker.api("PUT", f"vhosts/{quote(name, safe='')}")
        broker.api(
            "PUT",
            f"permissions/{quote(name, safe='')}/{quote(broker.connection.username, safe='')}",
            json={"configure": ".*", "write": ".*", "read": ".*"},
        )
    try:
        yield name
    finally:
        try:
            broker.api("DELETE", f"vhosts/{quote(name, safe='')}")
        except requests.RequestException:
            pass


@pytest.fixture
def vhost(broker: Broker) -> Iterator[str]:
    """A vhost of its own for one test, deleted afterwards."""
    with vhost_of_its_own(broker) as name:
        yield name


@pytest.fixture(scope="session")
def behaviour(broker: Broker) -> Behaviour:
    """What the session's broker does, by the version it reports (tests/broker/behaviour.py)."""
    return Behaviour(broker.version)
