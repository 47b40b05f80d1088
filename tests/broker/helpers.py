"""Publishing helpers shared by the broker tests and the tests built on them (capture, backup, restore, DAGs)."""

from __future__ import annotations

import time

import pika

from airflow_rbak.broker.connection import RabbitMQConnection

from .messages import WireProperties, body_of, wire_properties

PLAIN = pika.BasicProperties(delivery_mode=2)


def publish(
    connection: RabbitMQConnection, vhost: str, queue: str, count: int, size: int = 1024, *,
    start: int = 0, rich: bool = True, stream: bool = False, properties: pika.BasicProperties | None = None,
    settle: float = 60.0,
) -> None:
    """Publish messages ``start .. start+count-1`` and return once the queue holds them all.

    No publisher confirms: a confirm per message costs a round trip each
    (hours for the deep tests). Instead the queue's depth, which counts only
    enqueued messages, must reach its old depth + ``count`` within ``settle``
    seconds. ``rich`` messages carry every property and typed header
    (:mod:`.messages`); ``stream`` limits them to what 3.10 streams keep.
    """
    conn = pika.BlockingConnection(connection.pika_parameters(vhost))
    try:
        ch = conn.channel()
        expected = ch.queue_declare(queue, passive=True).method.message_count + count
        for i in range(start, start + count):
            props = properties or (WireProperties(wire_properties(i, connection.username, stream)) if rich else PLAIN)
            ch.basic_publish("", queue, body_of(i, size), props)
        # A stream's count also includes the consumer offsets stored in it (one entry each, written whenever the
        # broker gets to it), so it may run one or more ahead of the messages.
        wait_for_depth(ch, queue, expected, settle, at_least=stream)
    finally:
        conn.close()


def wait_for_depth(channel: pika.adapters.blocking_connection.BlockingChannel, queue: str, expected: int, settle: float,
                   at_least: bool = False) -> int:
    """Poll the exact depth (passive declare) until it is ``expected`` (or more, ``at_least``); fail the test after
    ``settle`` seconds."""
    deadline = time.monotonic() + settle
    while (found := channel.queue_declare(queue, passive=True).method.message_count) != expected and not (
            at_least and found > expected):
        assert time.monotonic() < deadline, f"queue {queue!r} holds {found} messages after {settle}s, expected {expected}"
        time.sleep(0.05)
    return found


def declare(connection: RabbitMQConnection, vhost: str, queue: str, queue_type: str, **arguments: object) -> None:
    conn = pika.BlockingConnection(connection.pika_parameters(vhost))
    try:
        conn.channel().queue_declare(queue, durable=True, arguments={"x-queue-type": queue_type, **arguments})
    finally:
        conn.close()


def depth(connection: RabbitMQConnection, vhost: str, queue: str, expect: int | None = None, wait: float = 10.0) -> int:
    """Ready messages; waits up to ``wait`` for ``expect`` (quorum returns settle asynchronously)."""
    deadline = time.monotonic() + wait
    while True:
        conn = pika.BlockingConnection(connection.pika_parameters(vhost))
        try:
            n = conn.channel().queue_declare(queue, passive=True).method.message_count
        finally:
            conn.close()
        if expect is None or n == expect or time.monotonic() > deadline:
            return n
        time.sleep(0.2)
