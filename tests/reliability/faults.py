"""Broker faults for the reliability tests, injected at a chosen point of a backup or restore.

Faults come from the broker side, as an operator or a crash would cause them:
``rabbitmqctl close_all_connections`` (the broker closes every AMQP connection
of a vhost) and ``rabbitmqctl stop_app`` / ``start_app`` (the RabbitMQ
application stops: every connection drops, the AMQP and HTTP listeners close,
and on start every durable queue is recovered from disk; only the Erlang VM
stays up, which keeps a restart to seconds). ``TriggerStorage`` fires a fault
from inside the engine's own storage call, so it lands at an exact point (the
second staged chunk, the second segment read) while the engine holds
unacknowledged deliveries or unconfirmed publishes, not wherever a timer
happens to fall.
"""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pika
import requests

from airflow_rbak.broker.connection import RabbitMQConnection
from airflow_rbak.storage.base import ObjectInfo, Storage

NODE = os.environ.get("RBAK_RABBIT_NODE", "rabbit@localhost")
#: rabbitmqctl runs where the node runs (a RabbitMQ 4.x node's in its chroot): through the script that started it.
CTL = [str(Path(__file__).resolve().parents[2] / "scripts" / "rabbitmq.sh"), "ctl"]


def _check_node() -> None:
    """Refuse to fault a node the tests did not start: a private port without its node name would mean
    ``rabbit@localhost``, which may be someone else's broker."""
    assert "RBAK_RABBIT_NODE" in os.environ or os.environ.get("RBAK_AMQP_PORT", "5672") == "5672", (
        "RBAK_AMQP_PORT is set but RBAK_RABBIT_NODE is not: set the node name of the tests' private broker")


def rabbitmqctl(*args: str, timeout: float = 120) -> str:
    """Run ``rabbitmqctl -n NODE args`` against the tests' private node; fail the test if it fails."""
    _check_node()
    done = subprocess.run([*CTL, *args], capture_output=True, text=True, timeout=timeout)
    assert done.returncode == 0, f"rabbitmqctl {' '.join(args)} failed: {done.stderr.strip()[-500:]}"
    return done.stdout


def close_all_connections(vhost: str) -> None:
    """The broker closes every AMQP connection to ``vhost`` (320 CONNECTION_FORCED). Without ``-p`` the
    command only touches vhost ``/``."""
    rabbitmqctl("close_all_connections", "-p", vhost, "reliability test")


def stop_app() -> None:
    rabbitmqctl("stop_app")


def start_app(connection: RabbitMQConnection, wait: float = 90) -> None:
    """Start the application and return once AMQP and the management API both answer again."""
    rabbitmqctl("start_app")
    deadline = time.monotonic() + wait
    while True:
        try:
            pika.BlockingConnection(connection.pika_parameters("/")).close()
            requests.get(f"{connection.management_base_url}/api/overview", auth=(connection.username, connection.password),
                         timeout=5).raise_for_status()
            return
        except (pika.exceptions.AMQPError, requests.RequestException, OSError):
            assert time.monotonic() < deadline, f"broker not back {wait}s after start_app"
            time.sleep(0.3)


def stop_app_when_vhost_has_exchanges(vhost: str, count: int) -> subprocess.Popen:
    """Start a CLI call that waits inside the broker until ``vhost`` holds ``count`` exchanges (the built-in
    ``amq.*`` ones included), then stops the application: the fault lands inside a definitions import (it
    creates exchanges first, then queues, then bindings), however fast the machine is. Returns once the waiter
    runs (the CLI takes a second or two to start); the caller kills it if it is still waiting.

    Why exchanges: RabbitMQ 3.10.8 can deadlock stopping while classic queues are being declared (a new queue
    asks the vhost supervisor for its message store while that supervisor waits for its queues to stop).
    """
    _check_node()
    program = (
        f'register(rbak_fault_waiter, self()), V = <<"{vhost}">>, Wait = fun W(N) when N > 6000 -> timeout; '
        f"W(N) -> case length(rabbit_exchange:list(V)) >= {count} of true -> rabbit:stop(); "
        "false -> timer:sleep(5), W(N + 1) end end, Wait(0)."
    )
    waiter = subprocess.Popen([*CTL, "eval", program], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 60
    while rabbitmqctl("eval", "is_pid(whereis(rbak_fault_waiter)).").strip() != "true":
        if waiter.poll() is not None or time.monotonic() > deadline:
            waiter.kill()
            raise AssertionError(f"the fault waiter did not start: {waiter.communicate()}")
        time.sleep(0.2)
    return waiter


class TriggerStorage(Storage):
    """A storage that passes every call through and runs ``action`` once, inside the first call that matches.

    The engine's thread is held until the action has finished, so the fault has happened (the connection is
    closed, the broker is down) before the engine takes its next step.
    """

    def __init__(self, inner: Storage) -> None:
        self.inner, self.url = inner, inner.url
        self._when: Callable[[str, str], bool] | None = None
        self._action: Callable[[], None] | None = None
        self._left = 0
        self.fired_at: str | None = None

    def arm(self, when: Callable[[str, str], bool], action: Callable[[], None], nth: int = 1) -> None:
        """Run ``action`` in the ``nth`` call for which ``when(operation, key)`` holds (operation ``put``/``get``)."""
        self._when, self._action, self._left, self.fired_at = when, action, nth, None

    def _maybe_fire(self, operation: str, key: str) -> None:
        if self._when is None or self._action is None or not self._when(operation, key):
            return
        self._left -= 1
        if self._left == 0:
            action, self._when, self._action = self._action, None, None
            self.fired_at = key
            action()

    def put(self, key: str, data: bytes) -> None:
        self.inner.put(key, data)
        self._maybe_fire("put", key)

    def get(self, key: str) -> bytes:
        data = self.inner.get(key)
        self._maybe_fire("get", key)
        return data

    def put_if_absent(self, key: str, data: bytes) -> bool:
        created = self.inner.put_if_absent(key, data)
        self._maybe_fire("put", key)
        return created

    def stat(self, key: str) -> ObjectInfo:
        return self.inner.stat(key)

    def list(self, prefix: str = "") -> Iterator[ObjectInfo]:
        return self.inner.list(prefix)

    def delete(self, key: str) -> None:
        self.inner.delete(key)
