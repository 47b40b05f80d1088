"""Is this still the stream the previous backup read? Offsets alone cannot say.

An incremental stream backup starts after the previous backup's last offset.
If the stream was deleted and re-created under the same name (or reset), its
offsets start again at 0, and "after the last offset" silently skips every
message below it. So a backup keeps a fingerprint of the message at its last
offset (``message_identity.stream_fingerprint``), and the next one reads that offset again: the same message means the
same stream; anything else (no such offset, another message) means the stream
must be captured from its start.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import pika

from airflow_rbak.broker import amqp_types
from airflow_rbak.broker.amqp_client import CONNECTION_ERRORS, close_quietly, open_connection
from airflow_rbak.broker.connection import RabbitMQConnection
from airflow_rbak.capture.errors import CaptureInterruptedError
from airflow_rbak.capture.message_identity import stream_delivery_fingerprint
from airflow_rbak.display import package_logger

log = package_logger(__name__)

OFFSET_HEADER = "x-stream-offset"


@dataclass(frozen=True)
class StreamMark:
    """Where a previous backup of a stream ended: its last offset and that message's fingerprint."""

    backup_id: str
    last_offset: int
    fingerprint: str | None


def offset_of(props: pika.spec.BasicProperties) -> int | None:
    """A stream delivery's offset (its ``x-stream-offset`` header), or None when it carries none."""
    for key, value in amqp_types.headers_of(props):
        if key == OFFSET_HEADER:
            return int(value.value)
    return None


def fingerprint_at(connection: RabbitMQConnection, vhost: str, stream: str, offset: int, wait: float) -> str | None:
    """The fingerprint of the message at ``offset``, or None when the stream holds no message there.

    The caller knows the stream's tail reaches ``offset``, so a delivery is due; a stream whose first
    delivery is past ``offset`` lost it to retention or was re-created. No delivery in ``wait`` seconds
    is an error, not an answer: a slow broker must not reset a backup chain.
    """
    conn = open_connection(connection, vhost)
    found: dict[str, object] = {}
    try:
        channel = conn.channel()
        channel.basic_qos(prefetch_count=64)

        def on_message(_ch: object, method: pika.spec.Basic.Deliver, props: pika.spec.BasicProperties, body: bytes) -> None:
            at = offset_of(props)
            if "offset" in found or at is None or at < offset:
                return  # a chunk starts before the offset asked for
            found["offset"] = at
            found["fingerprint"] = stream_delivery_fingerprint(method, props, body) if at == offset else None

        channel.basic_consume(stream, on_message, auto_ack=False, arguments={"x-stream-offset": offset})
        deadline = time.monotonic() + wait
        while "offset" not in found and time.monotonic() < deadline:
            conn.process_data_events(time_limit=0.25)
    except CONNECTION_ERRORS as exc:
        raise CaptureInterruptedError(
            f"cannot read offset {offset} of stream {stream!r} in vhost {vhost!r} ({type(exc).__name__}); re-run") from None
    finally:
        close_quietly(conn)
    if "offset" not in found:
        raise CaptureInterruptedError(
            f"stream {stream!r} in vhost {vhost!r} delivered nothing at offset {offset} within {wait:.0f} s; re-run")
    return found["fingerprint"]  # type: ignore[return-value]


def resume_offset(
    connection: RabbitMQConnection, vhost: str, stream: str, mark: StreamMark | None, tail: int, wait: float
) -> int:
    """Where an incremental capture starts: after ``mark`` if the stream still holds that message, else 0."""
    if mark is None or mark.last_offset < 0:
        return 0
    if tail < mark.last_offset:
        reason = f"its last offset is now {tail}, below {mark.last_offset}"
    elif mark.fingerprint is None:
        return mark.last_offset + 1  # a backup from before fingerprints: trust the offsets
    elif fingerprint_at(connection, vhost, stream, mark.last_offset, wait) != mark.fingerprint:
        reason = f"offset {mark.last_offset} no longer holds the message backup {mark.backup_id!r} ended with"
    else:
        return mark.last_offset + 1
    log.warning("stream %r in vhost %r was re-created or truncated since backup %r (%s): capturing it from its first "
                "offset, not incrementally", stream, vhost, mark.backup_id, reason)
    return 0
