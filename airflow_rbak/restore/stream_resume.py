"""A resumed stream restore reads back what it would count as its own before it skips those records.

After a crash a re-run counts the target's growth since the checkpoint as records the crashed attempt had in flight,
and skips as many. For a classic or quorum queue the count is all there is (its messages cannot be read without
taking them); a stream is read without consuming, so there the messages at the offsets the re-run would count are
compared with the records it would skip: the body and the ids a publisher sets (``message_id``, ``correlation_id``).
Any difference means someone else wrote to the stream, and the re-run refuses before it sends anything.

The read has a connection of its own, closed without cancelling its consumer first: a stream refuses the requeue
that cancelling a consumer with deliveries still buffered would ask for, and closes the connection that asks.
"""

from __future__ import annotations

import pika
import pika.exceptions

from airflow_rbak.broker.connection import RabbitMQConnection
from airflow_rbak.broker.pika_connection import blocking_connection
from airflow_rbak.capture.stream_identity import offset_of
from airflow_rbak.restore.errors import PublishError, UnexpectedMessagesError
from airflow_rbak.restore.records import Positioned

#: Seconds without a delivery before the read gives up: the offsets are below the tail, so they are due at once.
STALL_SECONDS = 30.0
_PREFETCH = 500


def check_gap(connection: RabbitMQConnection, vhost: str, stream: str, start: int, skip: list[Positioned],
              stall: float = STALL_SECONDS) -> None:
    """Raise :class:`UnexpectedMessagesError` unless offsets ``start`` .. ``start + len(skip) - 1`` of ``stream``
    hold the records of ``skip``, in order."""
    if not skip:
        return
    end = start + len(skip)
    seen = 0
    conn = None
    try:
        conn = blocking_connection(connection.pika_parameters_all(vhost))
        channel = conn.channel()
        channel.basic_qos(prefetch_count=min(len(skip), _PREFETCH))
        for method, props, body in channel.consume(stream, arguments={"x-stream-offset": start}, inactivity_timeout=stall):
            if method is None:
                break
            channel.basic_ack(method.delivery_tag)  # a stream only grants credit for acknowledged deliveries
            offset = offset_of(props)
            if offset is None or offset < start:
                continue  # a chunk may start before the offset asked for
            if offset >= end:
                break
            difference = _difference(skip[offset - start], props, body)
            if difference:
                raise _foreign(vhost, stream, start, end, offset, skip[offset - start], difference)
            seen += 1
            if offset == end - 1:
                break
    except pika.exceptions.AMQPError as exc:
        raise PublishError(f"cannot read offsets {start}..{end - 1} of stream {vhost}/{stream} to check what an earlier "
                           f"attempt left there ({type(exc).__name__}); re-run") from None
    finally:
        try:
            if conn is not None:
                conn.close()
        except pika.exceptions.AMQPError:
            pass
    if seen != len(skip):
        raise PublishError(f"stream {vhost}/{stream} delivered {seen} of the {len(skip)} messages at offsets {start}.."
                           f"{end - 1} within {stall:.0f} s; nothing was published by this run; re-run")


def _difference(item: Positioned, props: pika.BasicProperties, body: bytes) -> str:
    """What differs between a record and the message found where it would be ("" when nothing does)."""
    if bytes(body) != bytes(item.record.body):
        return f"its body differs ({len(body)} bytes, the record's {len(item.record.body)})"
    for name in ("message_id", "correlation_id"):
        found, expected = getattr(props, name), getattr(item.record.properties, name)
        if found != expected:
            return f"its {name} differs"
    return ""


def _foreign(vhost: str, stream: str, start: int, end: int, offset: int, item: Positioned,
             difference: str) -> UnexpectedMessagesError:
    return UnexpectedMessagesError(
        f"stream {vhost}/{stream} grew by {end - start} messages since this restore's checkpoint (offsets {start}.."
        f"{end - 1}), which a re-run would count as records its earlier attempt had in flight; but offset {offset} is "
        f"not record {item.index} of {item.segment_key}: {difference}. Something else publishes to the stream. "
        "Nothing was published by this run. Stop the other publisher, then restore into a new stream (a stream cannot "
        "be purged) with a fresh checkpoint_state")
