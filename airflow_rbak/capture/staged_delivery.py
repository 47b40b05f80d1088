"""What the capture stages for each message: the delivery as received (``codec/staged_records.py``), from pika's objects.

Decoding the properties and building the record's JSON cost the consuming
thread as much as pika's own handling of the delivery (docs/performance.md),
so the capture stages each delivery as it came, its property list undecoded
(:class:`~airflow_rbak.broker.amqp_types.DeliveredProperties` keeps it), and
the encode step reads it into the record JSON without pika.
"""

from __future__ import annotations

from typing import Any

from airflow_rbak.codec.staged_records import staged_record


def stage_delivery(
    method: Any, props: Any, body: bytes, backed_up_at: int, dropped: int, delivery_tag: int | None = None
) -> bytes:
    """One delivery as a staged record; ``dropped`` indexes ``DROPPED_HEADERS``, ``delivery_tag`` replaces the
    delivery's own (a stream's records carry the offset). Runs once per message."""
    raw = props.__dict__.get("raw")
    if raw is None:  # properties not from our connections (tests, a plain pika channel): encode them
        raw = b"".join(props.encode())
    return staged_record(
        _utf8(method.exchange), _utf8(method.routing_key), raw, body, backed_up_at,
        method.delivery_tag if delivery_tag is None else delivery_tag, method.redelivered, dropped,
    )


def _utf8(value: str | bytes) -> bytes:
    return value.encode("utf-8") if isinstance(value, str) else bytes(value)  # pika gives bytes when not UTF-8
