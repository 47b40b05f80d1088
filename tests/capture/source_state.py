"""A source queue's state as a backup must leave it: its depth, its order and each message's broker counters.

The queue-features tests (tests/capture/test_queue_feature_rows.py) read this before and after a capture and
compare. Reading is itself a return: every message is received without ack and given back with one
``basic.nack(multiple, requeue)``, which raises the broker's counters as a backup's return does (a quorum queue's
``x-delivery-count`` before 4.3, its ``x-acquired-count`` from 4.3; tests/broker/behaviour.py). So the state after
a capture that changed nothing is the state before advanced by two returns (the first reading's and the capture's),
and after a queue left out by one (the first reading's only).

A feature is set once by argument and once by policy (or operator policy): :func:`declare_with` declares the queue
either way from the policy's keys (an argument is the key with ``x-``), and waits until the management API shows the
policy on the queue, never a fixed time (RabbitMQ 4.0 shows it after about 6 s).
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

import pika
import requests

from airflow_rbak.codec.broker_headers import ALL_BROKER_HEADER_NAMES

#: How a feature is set: by the queue's own argument, a policy, or an operator policy.
HOW = ("argument", "policy", "operator-policy")


@dataclass(frozen=True)
class Message:
    """One ready message as read: its number (the body's first 8 bytes), redelivered flag and broker counters."""

    number: int
    redelivered: bool
    counters: tuple[tuple[str, int], ...]
    body: bytes


@dataclass(frozen=True)
class SourceState:
    """A queue's ready messages in delivery order."""

    messages: tuple[Message, ...]

    @property
    def depth(self) -> int:
        return len(self.messages)

    @property
    def order(self) -> list[int]:
        return [m.number for m in self.messages]

    def counters(self) -> list[dict[str, int]]:
        return [dict(m.counters) for m in self.messages]


def read_state(channel: Any, queue: str, by_consumer: bool = False, wait: float = 20.0, stream: int | None = None) -> SourceState:
    """Every ready message of ``queue`` on ``channel``, all given back in order afterwards (one requeueing nack).

    By ``basic.get`` (no consumer: safe on an auto-delete queue, and past an application's single active consumer),
    or by one consumer where the broker refuses ``basic.get`` (a quorum single-active-consumer queue on 3.10). A
    stream's ``stream`` messages are read from its first offset and acknowledged (a stream keeps them)."""
    expected = channel.queue_declare(queue, passive=True).method.message_count if stream is None else stream
    seen: list[Message] = []

    def keep(method: Any, props: Any, body: bytes) -> None:
        headers = props.headers or {}
        counters = tuple(sorted((k, int(v)) for k, v in headers.items() if k in ALL_BROKER_HEADER_NAMES))
        seen.append(Message(int.from_bytes(body[:8], "big"), bool(method.redelivered), counters, bytes(body)))

    if by_consumer or stream is not None:
        channel.basic_qos(prefetch_count=max(expected, 1))
        tag = channel.basic_consume(queue, lambda _ch, method, props, body: keep(method, props, body),
                                    arguments={"x-stream-offset": "first"} if stream is not None else None)
        deadline = time.monotonic() + wait
        while len(seen) < expected:
            assert time.monotonic() < deadline, f"{queue!r} delivered {len(seen)} of {expected} messages"
            channel.connection.process_data_events(time_limit=0.1)
        channel.basic_cancel(tag)
    else:
        while (got := channel.basic_get(queue, auto_ack=False))[0] is not None:
            keep(*got)
    if seen:
        if stream is not None:
            channel.basic_ack(0, multiple=True)
        else:
            channel.basic_nack(0, multiple=True, requeue=True)
    return SourceState(tuple(seen))


def source_state(connection: Any, vhost: str, queue: str, by_consumer: bool = False, stream: int | None = None) -> SourceState:
    """:func:`read_state` on a connection of its own, which it closes once every message is back."""
    conn = pika.BlockingConnection(connection.pika_parameters(vhost))
    try:
        channel = conn.channel()
        state = read_state(channel, queue, by_consumer, stream=stream)
        if stream is None:
            wait_for_ready(channel, queue, state.depth)
        return state
    finally:
        conn.close()


def state_without_waiting(connection: Any, vhost: str, queue: str) -> SourceState:
    """:func:`read_state` on a connection of its own, not waiting for the messages to be back: a reading whose own
    return changes what a later one would see (under a delivery limit, it takes every message one count higher)."""
    conn = pika.BlockingConnection(connection.pika_parameters(vhost))
    try:
        return read_state(conn.channel(), queue)
    finally:
        conn.close()


def wait_for_ready(channel: Any, queue: str, expected: int, wait: float = 30.0) -> None:
    """A quorum queue takes nacked messages back asynchronously: wait until they are ready again."""
    deadline = time.monotonic() + wait
    while channel.queue_declare(queue, passive=True).method.message_count != expected:
        assert time.monotonic() < deadline, f"{queue!r} did not take its {expected} messages back"
        time.sleep(0.05)


def declare_with(broker: Any, vhost: str, queue: str, queue_type: str, how: str, settings: Mapping[str, object],
                 declared: Mapping[str, object] | None = None, **flags: bool) -> None:
    """Declare ``queue`` (durable unless ``flags`` say otherwise; with the ``declared`` arguments) with ``settings``
    (policy keys) set ``how``: as arguments (``x-`` + key) or by a (operator) policy matching only this queue, waited
    for until the queue shows it."""
    arguments: dict[str, object] = {"x-queue-type": queue_type, **(declared or {})}
    if how == "argument":
        arguments.update({f"x-{k}": v for k, v in settings.items()})
    conn = pika.BlockingConnection(broker.connection.pika_parameters(vhost))
    try:
        conn.channel().queue_declare(queue, durable=not flags.get("auto_delete"), arguments=arguments, **flags)
    finally:
        conn.close()
    if how != "argument":
        apply_policy(broker, vhost, queue, settings, operator=how == "operator-policy")


def apply_policy(broker: Any, vhost: str, queue: str, definition: Mapping[str, object], operator: bool = False,
                 apply_to: str = "queues") -> None:
    """A (operator) policy of ``definition`` on ``queue`` alone, once the management API shows it on the queue."""
    kind = "operator-policies" if operator else "policies"
    broker.api("PUT", f"{kind}/{quote(vhost, safe='')}/{quote(queue, safe='')}",
               json={"pattern": f"^{queue}$", "definition": dict(definition), "apply-to": apply_to, "priority": 1})
    wait_for_policy(broker, vhost, queue, "operator_policy" if operator else "policy", queue)


def policy_refused(broker: Any, vhost: str, definition: Mapping[str, object], operator: bool = False) -> bool:
    """Whether the broker refuses a (operator) policy of ``definition`` as invalid (400), the way it refuses a key it
    does not know: then no policy can set that feature."""
    kind = "operator-policies" if operator else "policies"
    try:
        broker.api("PUT", f"{kind}/{quote(vhost, safe='')}/probe", json={"pattern": "^probe$", "definition": dict(definition)})
    except requests.HTTPError as exc:
        return exc.response is not None and exc.response.status_code == 400
    broker.api("DELETE", f"{kind}/{quote(vhost, safe='')}/probe")
    return False


def wait_for_policy(broker: Any, vhost: str, queue: str, field: str, name: str, wait: float = 60.0) -> None:
    """Until the management API shows policy ``name`` in the queue's ``field`` (``policy`` or ``operator_policy``)."""
    deadline = time.monotonic() + wait
    while broker.api("GET", f"queues/{quote(vhost, safe='')}/{quote(queue, safe='')}").json().get(field) != name:
        assert time.monotonic() < deadline, f"the {field} {name!r} never showed on {queue!r}"
        time.sleep(0.2)


def wait_for_consumers(broker: Any, vhost: str, queue: str, expected: int, wait: float = 60.0) -> None:
    """Until the management API counts ``expected`` consumers on the queue (its figures refresh every few seconds, and
    a capture decides from them)."""
    deadline = time.monotonic() + wait
    while broker.api("GET", f"queues/{quote(vhost, safe='')}/{quote(queue, safe='')}").json().get("consumers") != expected:
        assert time.monotonic() < deadline, f"{queue!r} never showed {expected} consumers"
        time.sleep(0.2)
