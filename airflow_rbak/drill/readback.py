"""The two sides a drill compares, each as :class:`~airflow_rbak.drill.compare.MessageView` in order: the backup's
records of a queue, read with the strict codec (not the restore's publish fast path, which is what the drill checks),
and the messages the scratch queue delivers.

The expected side leaves out what a restore never publishes (routing headers and the broker's own headers of the
source's queue type, :func:`airflow_rbak.restore.wire.left_out_headers`); the delivered side leaves out the headers the
target's queue type adds on delivery. Everything else (body, the 13 properties, every other header, its type and its
place in the table) must be equal.

A classic or quorum scratch queue is read by ``basic.get`` until it is empty: the vhost is the drill's own, so the
read takes the messages, and an empty answer ends it without waiting on a clock. A stream is read by a consumer from
its first offset up to an end marker the read publishes first, so it ends on what the stream holds, not on a clock.
"""

from __future__ import annotations

import hashlib
import secrets
import time
from collections.abc import Iterator
from typing import Any

import pika

from airflow_rbak.broker import amqp_types
from airflow_rbak.broker.connection import RabbitMQConnection
from airflow_rbak.broker.pika_connection import blocking_connection
from airflow_rbak.codec import iter_records
from airflow_rbak.codec.broker_headers import broker_headers
from airflow_rbak.codec.properties import PIKA_NAMES, PROPERTY_NAMES
from airflow_rbak.drill.compare import MessageView
from airflow_rbak.restore.errors import DamagedSegmentsError
from airflow_rbak.restore.restore_plan import QueuePlan
from airflow_rbak.restore.wire import left_out_headers
from airflow_rbak.storage.base import Storage

#: Messages read beyond what the backup holds before the read stops (each is reported as unexpected).
MAX_EXTRA = 100
#: How long a stream read waits for any delivery before it ends short: only a broker that stopped delivering.
STREAM_STALL_S = 120.0


def target_type(queue: QueuePlan) -> str:
    return queue.target_queue_type or queue.queue_type


def expected_views(storage: Storage, queue: QueuePlan, max_decompressed_bytes: int,
                   strip_user_id_except: str | None = None) -> Iterator[MessageView]:
    """The queue's records as the plan verified them, segment by segment in sequence order.

    ``strip_user_id_except``: the drill's user, when the restore publishes with ``strip_user_id``: a record whose
    ``user_id`` names another user is then published, and so expected, without it (RabbitMQ refuses it otherwise)."""
    left_out = left_out_headers(queue.queue_type) | broker_headers(target_type(queue))
    for segment in queue.segments:
        data = storage.get(segment.key)
        if hashlib.sha256(data).hexdigest() != segment.checksum:
            raise DamagedSegmentsError(f"{segment.key} changed since the drill's restore verified it",
                                       {segment.key: ["SHA-256 differs from the plan's"]})
        for record in iter_records(data, segment.key, max_decompressed_bytes):
            properties = record.properties.to_json()
            if strip_user_id_except is not None and properties["user_id"] not in (None, strip_user_id_except):
                properties["user_id"] = None
            yield MessageView(bytes(record.body), tuple((name, properties[name]) for name in PROPERTY_NAMES),
                              tuple(h for h in record.headers if h[0] not in left_out))


def delivered_view(props: Any, body: bytes, left_out: frozenset[str]) -> MessageView:
    """A delivered message as a view (``props`` decoded by our connection: typed headers)."""
    headers = tuple(h for h in amqp_types.headers_of(props) if h[0] not in left_out)
    return MessageView(bytes(body), tuple((name, getattr(props, pika)) for name, pika in zip(PROPERTY_NAMES, PIKA_NAMES)),
                       headers)


def delivered_views(connection: RabbitMQConnection, queue: QueuePlan, expected: int) -> Iterator[MessageView]:
    """The scratch queue's messages in delivery order, at most ``expected`` + :data:`MAX_EXTRA`."""
    left_out = broker_headers(target_type(queue))
    with blocking_connection(connection.pika_parameters(queue.target_vhost)) as conn:
        channel = conn.channel()
        if target_type(queue) == "stream":
            yield from _stream(conn, channel, queue.target_queue, expected, left_out)
            return
        for _ in range(expected + MAX_EXTRA):
            method, props, body = channel.basic_get(queue.target_queue, auto_ack=True)
            if method is None:
                return
            yield delivered_view(props, body, left_out)


def _stream(conn: Any, channel: Any, name: str, expected: int, left_out: frozenset[str]) -> Iterator[MessageView]:
    """The stream's messages from its first offset up to an end marker published now, after every message the
    restore had confirmed: when the marker arrives, all of them have been delivered, so the read ends on what the
    stream holds, never on a quiet moment. Only a broker that delivers nothing for :data:`STREAM_STALL_S` ends it
    short (the drill then reports what did not arrive). The marker stays in the scratch stream, which the drill
    deletes."""
    marker = f"airflow-rbak drill end {secrets.token_hex(8)}"
    channel.confirm_delivery()
    channel.basic_publish("", name, b"", pika.BasicProperties(message_id=marker, delivery_mode=2), mandatory=True)
    found: list[MessageView] = []
    ended: list[bool] = []
    channel.basic_qos(prefetch_count=500)

    def on_message(ch: Any, method: Any, props: Any, body: bytes) -> None:
        if props.message_id == marker:
            ended.append(True)
        else:
            found.append(delivered_view(props, body, left_out))
        ch.basic_ack(method.delivery_tag)

    channel.basic_consume(name, on_message, arguments={"x-stream-offset": "first"})
    given, stalled_at = 0, time.monotonic() + STREAM_STALL_S
    while not ended and given < expected + MAX_EXTRA and time.monotonic() < stalled_at:
        heard = len(found)
        conn.process_data_events(time_limit=0.5)
        if len(found) > heard or ended:
            stalled_at = time.monotonic() + STREAM_STALL_S
        while given < len(found) and given < expected + MAX_EXTRA:
            yield found[given]
            given += 1
    yield from found[given:expected + MAX_EXTRA]
