"""Seeding source queues, backing them up as rbak_backup does, and reading queues back for comparison."""

from __future__ import annotations

import struct
import time
from typing import Any
from urllib.parse import quote

import pika

from airflow_rbak.backup.run import BackupRun, BackupSettings
from airflow_rbak.broker import amqp_types
from airflow_rbak.broker.connection import RabbitMQConnection
from airflow_rbak.broker.discovery import QueueSelector
from airflow_rbak.broker.pika_connection import ConfirmChannel, blocking_connection
from airflow_rbak.codec import BackupManifest
from airflow_rbak.codec.broker_headers import ALL_BROKER_HEADER_NAMES
from airflow_rbak.codec.field_table import decimal_value, decode_value
from airflow_rbak.codec.headers import HeaderValue as H
from airflow_rbak.codec.properties import PIKA_NAMES
from tests.broker.behaviour import Behaviour


def body_of(i: int, size: int) -> bytes:
    """A deterministic body of ``size`` bytes for message ``i`` (all byte values occur)."""
    head = struct.pack(">Q", i)
    return (head + bytes((i * 7 + k) % 256 for k in range(64)) * (size // 64 + 1))[:size]


def props_of(i: int, decimal: bool = True, persistent: bool = False) -> amqp_types.TypedBasicProperties:
    """Every basic property set, and headers of every wire type, varying with ``i``.

    ``decimal=False`` leaves out the decimal header: RabbitMQ 3.10 closes the
    connection (541 INTERNAL_ERROR) when a decimal header is published to a stream.
    Every third message is transient (``delivery_mode`` 1) unless ``persistent``:
    a classic queue loses transient messages when the broker restarts.
    """
    headers = (
        ("seq", H.long(i)), ("small", H.short(i % 30000)), ("name", H.long_string(f"msg-{i}")), ("ok", H.bool_(i % 2 == 0)),
        ("ratio", H.double(i / 3)), ("f32", H.float32(i / 8)), ("blob", H.bytes_(bytes([i % 256, 0, 255]))),
        ("when", H.timestamp(1_700_000_000 + i)), ("none", H.void()),
        ("nested", H.table([("list", H.array([H.long(i), H.void(), H.long_string("x")]))])),
        ("price", decimal_value(2, i)),
    )[: None if decimal else -1]
    return amqp_types.TypedBasicProperties(
        content_type="application/octet-stream", content_encoding="identity", delivery_mode=2 if i % 3 or persistent else 1,
        priority=i % 10, correlation_id=f"c-{i}", reply_to="replies", expiration="86400000", message_id=f"m-{i}",
        timestamp=1_700_000_000 + i, type="test.event", user_id="guest", app_id="rbak-tests", cluster_id="c1",
        typed_headers=headers,
    )


BROKER_HEADERS = ALL_BROKER_HEADER_NAMES  # broker state a consumer sees, not the publisher's (the one table)
PROPERTY_NAMES = PIKA_NAMES  # pika's attribute names, from the one table


def declare(connection: RabbitMQConnection, vhost: str, queues: dict[str, str]) -> None:
    with blocking_connection(connection.pika_parameters(vhost)) as conn:
        channel = conn.channel()
        for name, queue_type in queues.items():
            channel.queue_declare(name, durable=True, arguments={"x-queue-type": queue_type})


def publish(connection: RabbitMQConnection, vhost: str, queue: str, start: int, count: int, size: int = 300,
            decimal: bool = True, persistent: bool = False) -> None:
    """Messages ``start..start+count-1`` (every property, typed headers), all confirmed (durable) on return.

    Confirms are awaited together at the end: per-message confirms cost a round trip each.
    """
    with blocking_connection(connection.pika_parameters(vhost)) as conn:
        acked: set[int] = set()

        def on_confirm(frame: Any) -> None:
            tag = frame.method.delivery_tag
            acked.update(range(1, tag + 1) if frame.method.multiple else (tag,))

        channel = ConfirmChannel(conn, on_confirm)  # pipelined confirms, as the restore publisher does
        for i in range(start, start + count):
            channel.publish("", queue, body_of(i, size), props_of(i, decimal, persistent))
        deadline = time.monotonic() + 60
        while len(acked) < count and time.monotonic() < deadline:
            conn.process_data_events(time_limit=0.05)
        assert len(acked) == count, f"only {len(acked)} of {count} publishes confirmed"


def backup(connection: RabbitMQConnection, location: str, backup_id: str, vhost: str, **kwargs: Any) -> BackupManifest:
    """A backup made the way rbak_backup makes it: the BackupRun steps.

    With ``allow_delivery_count_increase`` unless a test says otherwise: the restore tests need the source's quorum
    queues in the backup on every version, and RabbitMQ 4.0 would have them left out (a return counts toward its
    default delivery limit; ``tests/capture`` holds the capture to that rule). Harmless elsewhere: no queue of 3.10
    or 4.3 is left out for it."""
    kwargs.setdefault("allow_delivery_count_increase", True)
    settings = BackupSettings(backup_id, location, selector=QueueSelector(vhosts=(vhost,)), **kwargs)
    return BackupRun(connection, settings).run()


def message_view(props: pika.BasicProperties, body: bytes, broker_headers: bool = False) -> tuple:
    """Everything a consumer sees of a message but the broker's own headers (typed, so Short != Long)."""
    headers = tuple(h for h in (amqp_types.headers_of(props)) if broker_headers or h[0] not in BROKER_HEADERS)
    return (bytes(body), tuple(getattr(props, n) for n in PROPERTY_NAMES), headers)


def read_queue(connection: RabbitMQConnection, vhost: str, queue: str, queue_type: str, expected: int, wait: float = 20.0,
               broker_headers: bool = False) -> list[tuple]:
    """Every message of a queue in order (a stream from its first offset), up to ``expected`` or until quiet."""
    found: list[tuple] = []
    with blocking_connection(connection.pika_parameters(vhost)) as conn:
        channel = conn.channel()
        channel.basic_qos(prefetch_count=1000)
        args = {"x-stream-offset": "first"} if queue_type == "stream" else None

        def on_message(ch: Any, method: Any, props: Any, body: bytes) -> None:
            found.append(message_view(props, body, broker_headers))
            ch.basic_ack(method.delivery_tag)

        channel.basic_consume(queue, on_message, arguments=args)
        deadline, last = time.monotonic() + wait, 0
        while time.monotonic() < deadline and len(found) < expected:
            conn.process_data_events(time_limit=0.2)
            if len(found) != last:
                last, deadline = len(found), max(deadline, time.monotonic() + 2)
        conn.process_data_events(time_limit=0.5 if queue_type != "stream" else 1.0)  # anything beyond expected?
    return found


def ready_count(connection, vhost: str, queue: str) -> int:
    """Ready messages now, by passive declare (the management API's figures can be 5 s old)."""
    with blocking_connection(connection.pika_parameters(vhost)) as conn:
        return conn.channel().queue_declare(queue, passive=True).method.message_count


def management_depth(broker: Any, vhost: str, queue: str) -> int:
    return int(broker.api("GET", f"queues/{quote(vhost, safe='')}/{quote(queue, safe='')}").json().get("messages") or 0)


def expected_view(i: int, queue_type: str) -> tuple:
    """Message ``i`` as a consumer of a queue of that type sees it after publishing.

    Streams on RabbitMQ 3.10 (AMQP 1.0 inside) take no decimal header, drop table and array headers and
    ``cluster_id``, and deliver the header table sorted by key.
    """
    body, props = body_of(i, 300), props_of(i, decimal=queue_type != "stream")
    view = message_view(props, body)
    if queue_type == "stream":
        kept = sorted((h for h in view[2] if h[1].kind not in ("Table", "Array")), key=lambda h: h[0])
        view = (view[0], view[1][:-1] + (None,), tuple(kept))
    return view


def _stream_view_4x(i: int) -> tuple:
    """Message ``i`` as an AMQP 0-9-1 consumer of a RabbitMQ 4.x stream gets it (measured on 4.0.5 and 4.3.6): as from
    3.10 (no table or array headers, no ``cluster_id``, the header table sorted by key; the stream protocol keeps the
    tables from 4.0, ``Behaviour.stream_keeps_table_headers``), and a byte-array header as a long string of its bytes."""
    body, props, headers = expected_view(i, "stream")
    return body, props, tuple((k, _as_long_string(v) if v.kind == "Bytes" else v) for k, v in headers)


def _as_long_string(value: H) -> H:
    raw = bytes(value.value)
    return decode_value(b"S" + struct.pack(">I", len(raw)) + raw, 0)[0]


PRIORITY = PROPERTY_NAMES.index("priority")


def expected_views(count: int, queue_type: str, behaviour: Behaviour, start: int = 0) -> list[tuple]:
    """Messages ``start..start+count-1``, published in order (:func:`publish`), as the session's broker delivers them:
    in its queue type's delivery order (a 4.x quorum queue by priority) and with the header table as it delivers it
    (sorted by key on 4.x, a 4.x stream's header types): every expectation from :class:`Behaviour`."""
    if queue_type == "stream" and behaviour.stream_bytes_as_long_string():
        views = [_stream_view_4x(i) for i in range(start, start + count)]
    else:
        views = [expected_view(i, queue_type) for i in range(start, start + count)]
    order = behaviour.delivery_order(queue_type, [view[1][PRIORITY] or 0 for view in views])
    ordered = [views[n] for n in order]
    if behaviour.sorts_headers(queue_type):
        return [(body, props, tuple(sorted(headers, key=lambda h: h[0]))) for body, props, headers in ordered]
    return ordered


def expected_partial(count: int, landed: int, queue_type: str, behaviour: Behaviour) -> list[tuple]:
    """What a target holds after a restore of ``count`` messages (:func:`publish`) stopped once ``landed`` were in it:
    the first ``landed`` records of the backup's stored order (the source's delivery order), as the target delivers
    them in turn (a 4.x quorum queue delivers by priority among the messages it holds)."""
    stored = expected_views(count, queue_type, behaviour)[:landed]
    return [stored[n] for n in behaviour.delivery_order(queue_type, [view[1][PRIORITY] or 0 for view in stored])]
