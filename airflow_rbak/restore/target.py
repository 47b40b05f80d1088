"""The target side of a queue restore: make sure the destination exists and measure how much it holds.

The depth is what makes a resumed restore exact: a classic or quorum queue's
ready-message count, or for a stream its tail offset + 1 (a stream's
``queue.declare-ok`` always reports 0 messages on RabbitMQ 3.10).
"""

from __future__ import annotations

import time

import pika
import pika.exceptions

from airflow_rbak.broker import stream_protocol
from airflow_rbak.broker.connection import RabbitMQConnection
from airflow_rbak.restore.errors import PublishError
from airflow_rbak.restore.plan import QueuePlan


def queue_exists(conn: pika.BlockingConnection, name: str) -> bool:
    """Passive declare on a throwaway channel (a 404 closes the channel it happens on)."""
    channel = conn.channel()
    try:
        channel.queue_declare(name, passive=True)
    except pika.exceptions.ChannelClosedByBroker as exc:
        if exc.reply_code == 404:
            return False
        raise
    channel.close()
    return True


def ensure_queue(conn: pika.BlockingConnection, queue: QueuePlan) -> bool:
    """Declare the target queue when it is missing, of the type it has in the target (a transformation may have
    converted it) rather than the backup's; True when it was created."""
    if queue_exists(conn, queue.target_queue):
        return False
    channel = conn.channel()
    channel.queue_declare(queue.target_queue, durable=True,
                          arguments={"x-queue-type": queue.target_queue_type or queue.queue_type})
    channel.close()
    return True


def check_exchanges(conn: pika.BlockingConnection, queue: QueuePlan) -> None:
    """Refuse to start an exchange-mode publish when an exchange the records name is missing in the target."""
    for name in queue.exchanges:
        if not name:
            continue
        channel = conn.channel()
        try:
            channel.exchange_declare(name, passive=True)
        except pika.exceptions.ChannelClosedByBroker as exc:
            if exc.reply_code == 404:
                raise PublishError(
                    f"exchange {name!r} does not exist in vhost {queue.target_vhost!r}; restore definitions first "
                    "(restore_definitions) or use publish_mode='queue'") from None
            raise
        channel.close()


def queue_depth(conn: pika.BlockingConnection, connection: RabbitMQConnection, queue: QueuePlan, settle: float = 0.0) -> int:
    """Messages in the target now; with ``settle`` > 0, reads until two readings agree (after a crash)."""
    reading = _read_depth(conn, connection, queue)
    deadline = time.monotonic() + settle
    while time.monotonic() < deadline:
        time.sleep(0.3)
        again = _read_depth(conn, connection, queue)
        if again == reading:
            break
        reading = again
    return reading


def _read_depth(conn: pika.BlockingConnection, connection: RabbitMQConnection, queue: QueuePlan) -> int:
    if queue.queue_type == "stream":
        tail = stream_protocol.stream_tail(connection, queue.target_vhost, queue.target_queue, wait=2.0)
        return 0 if tail is None else tail + 1
    channel = conn.channel()
    count = channel.queue_declare(queue.target_queue, passive=True).method.message_count
    channel.close()
    return int(count)
