"""Publishing and reading helpers shared by the broker tests."""

from __future__ import annotations

import struct
import tempfile
import time
from collections.abc import Callable

import pika

from airflow_rbak.broker import amqp_types
from airflow_rbak.broker.capture import CaptureOptions, CaptureResult, QueueCapture
from airflow_rbak.broker.checkpoints import CheckpointStore
from airflow_rbak.broker.connection import RabbitMQConnection
from airflow_rbak.broker.discovery import describe_queue
from airflow_rbak.broker.management import ManagementClient
from airflow_rbak.broker.staging import list_chunks
from airflow_rbak.codec import BackupRecord, decode_segment
from airflow_rbak.storage.base import Storage


def body_of(i: int, size: int) -> bytes:
    """A deterministic body of ``size`` bytes for message ``i`` (all byte values occur)."""
    head = struct.pack(">Q", i)
    return (head + bytes((i * 7 + k) % 256 for k in range(64)) * (size // 64 + 1))[:size]


def props_of(i: int) -> amqp_types.TypedBasicProperties:
    """Every basic property set, and typed headers, varying with ``i``."""
    from airflow_rbak.codec.headers import HeaderValue as H

    headers = (
        ("seq", H.long(i)),
        ("small", H.short(i % 30000)),
        ("name", H.long_string(f"msg-{i}")),
        ("ok", H.bool_(i % 2 == 0)),
        ("ratio", H.double(i / 3)),
        ("f32", H.float32(i / 8)),
        ("blob", H.bytes_(bytes([i % 256, 0, 255]))),
        ("when", H.timestamp(1_700_000_000 + i)),
        ("nested", H.table([("list", H.array([H.long(i), H.void(), H.long_string("x")]))])),
        ("price", amqp_types.decimal_value(2, i)),
    )
    return amqp_types.TypedBasicProperties(
        content_type="application/octet-stream", content_encoding="identity", delivery_mode=2, priority=i % 10,
        correlation_id=f"c-{i}", reply_to="replies", expiration="86400000", message_id=f"m-{i}",
        timestamp=1_700_000_000 + i, type="test.event", user_id="guest", app_id="rbak-tests", cluster_id="c1",
        typed_headers=headers,
    )


def publish(
    connection: RabbitMQConnection, vhost: str, queue: str, count: int, size: int = 1024,
    props: Callable[[int], pika.BasicProperties] | None = props_of, start: int = 0,
) -> None:
    """Publish ``count`` messages with confirms in batches (fast, and durable before returning)."""
    amqp_types.install()
    conn = pika.BlockingConnection(connection.pika_parameters(vhost))
    try:
        ch = conn.channel()  # no per-message confirms (one round trip each); callers wait for the depth
        for i in range(start, start + count):
            p = props(i) if props else pika.BasicProperties(delivery_mode=2)
            ch.basic_publish("", queue, body_of(i, size), p, mandatory=False)
    finally:
        conn.close()


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


def staged_records(storage: Storage, backup_id: str, vhost: str, queue: str) -> list[BackupRecord]:
    return [r for key in list_chunks(storage, backup_id, vhost, queue) for r in decode_segment(storage.get(key), name=key).records]


def capture_queue(
    connection: RabbitMQConnection, storage: Storage, backup_id: str, vhost: str, queue: str,
    db_path: str | None = None, **options: object,
) -> CaptureResult:
    """One capture with a checkpoint database mirrored to ``storage``."""
    with ManagementClient(connection) as mg:
        info = describe_queue(mg, vhost, queue)
        version = mg.version()
    checkpoints = CheckpointStore(db_path or tempfile.mktemp(suffix=".db"), storage, backup_id)
    try:
        return QueueCapture(connection, storage, checkpoints, CaptureOptions(backup_id, **options)).capture(info, version)
    finally:
        checkpoints.close()
