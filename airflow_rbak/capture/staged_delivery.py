"""What a staged chunk holds for each message: the delivery as received, made into its record JSON at encode.

A capture holds every message it reads until it gives them all back, and on a
small broker host its consuming thread shares the cores with the broker: each
microsecond spent per message there slows the capture. Decoding the properties
and building the record's JSON cost that thread as much as pika's own handling
of the delivery (docs/performance.md), so the capture stages each delivery as
it came instead: its delivery fields, the content header's property list
undecoded (:class:`~airflow_rbak.broker.amqp_types.DeliveredProperties`) and
the body. The encode step, after every message went back, builds the record
JSON from it with the same code the capture used before
(:func:`~airflow_rbak.capture.delivery_json.delivery_record_json`), so a
segment's bytes do not depend on where the JSON was made.

One staged record (little-endian)::

    u8  format (1)     u8  dropped headers (0 none, 1 a quorum queue's, 2 a stream's)
    u8  redelivered    u64 backed_up_at (ms)      u64 delivery tag (a stream's: the offset)
    u8  exchange length, exchange (UTF-8)         u8  routing key length, routing key
    u32 property list length, property list (AMQP 0-9-1 basic content header, flags first)
    body (the rest)

Records staged as JSON (first byte ``{``, by earlier versions) are read as they are.
"""

from __future__ import annotations

import struct
from typing import Any, NamedTuple

from airflow_rbak.broker.amqp_types import TypedBasicProperties
from airflow_rbak.capture.delivery_json import delivery_record_json
from airflow_rbak.capture.message_identity import QUORUM_BROKER_HEADERS, STREAM_BROKER_HEADERS
from airflow_rbak.codec.records import decode_record
from airflow_rbak.exceptions import RbakError

FORMAT = 1
_HEAD = struct.Struct("<BBBQQ")
_U32 = struct.Struct("<I")
#: The broker-owned headers a record leaves out, by the code a staged record carries.
DROPPED_HEADERS: tuple[frozenset[str], ...] = (frozenset(), QUORUM_BROKER_HEADERS, STREAM_BROKER_HEADERS)


class StagedRecordError(RbakError, ValueError):
    """A staged record cannot be read back (staging written by something else, or a delivery pika could not decode)."""


class _Delivery(NamedTuple):
    """The delivery fields :func:`delivery_record_json` reads."""

    exchange: Any
    routing_key: Any
    delivery_tag: int
    redelivered: bool


def stage_delivery(
    method: Any, props: Any, body: bytes, backed_up_at: int, dropped: int, delivery_tag: int | None = None
) -> bytes:
    """One delivery as a staged record; ``dropped`` indexes :data:`DROPPED_HEADERS` (runs once per message)."""
    raw = props.__dict__.get("raw")
    if raw is None:  # properties not from our connections (tests, a plain pika channel): encode them
        raw = b"".join(props.encode())
    exchange, routing_key = _text_bytes(method.exchange), _text_bytes(method.routing_key)
    return b"".join((
        _HEAD.pack(FORMAT, dropped, 1 if method.redelivered else 0, backed_up_at,
                   method.delivery_tag if delivery_tag is None else delivery_tag),
        bytes((len(exchange),)), exchange, bytes((len(routing_key),)), routing_key, _U32.pack(len(raw)), raw, body,
    ))


def _text_bytes(value: str | bytes) -> bytes:
    data = value.encode("utf-8") if isinstance(value, str) else bytes(value)
    if len(data) > 255:
        raise StagedRecordError(f"a delivery's exchange or routing key is {len(data)} bytes; AMQP allows 255")
    return data


def read_staged(staged: bytes | memoryview, queue: str, vhost: str) -> tuple[bytes, int]:
    """A staged record's JSON, exactly as the capture would have written it on receipt, and its ``backed_up_at``."""
    if staged[:1] == b"{":
        return bytes(staged), decode_record(staged).backed_up_at  # checked as encode always checked what it sealed
    _fmt, dropped, redelivered, stamp, tag = _head(staged)
    try:
        pos = _HEAD.size
        exchange, pos = _short(staged, pos)
        routing_key, pos = _short(staged, pos)
        (length,) = _U32.unpack_from(staged, pos)
        pos += 4
        if pos + length > len(staged):
            raise StagedRecordError("a staged record's property list runs past its end")
        props = TypedBasicProperties().decode(bytes(staged[pos : pos + length]))
        body = bytes(staged[pos + length :])
    except (struct.error, IndexError) as exc:
        raise StagedRecordError(f"a staged record is truncated ({exc})") from None
    delivery = _Delivery(exchange, routing_key, tag, bool(redelivered))
    record = delivery_record_json(delivery, props, body, queue=queue, vhost=vhost, backed_up_at=stamp,
                                  drop_headers=DROPPED_HEADERS[dropped])
    return record, stamp


def _head(staged: bytes | memoryview) -> tuple[int, int, int, int, int]:
    if len(staged) < _HEAD.size:
        raise StagedRecordError(f"a staged record of {len(staged)} bytes is shorter than its header")
    head: tuple[int, int, int, int, int] = _HEAD.unpack_from(staged)
    if head[0] != FORMAT or head[1] >= len(DROPPED_HEADERS):
        raise StagedRecordError(f"a staged record has format {head[0]} and header code {head[1]}; this version "
                                f"reads format {FORMAT} (and record JSON)")
    return head


def _short(staged: bytes | memoryview, pos: int) -> tuple[str | bytes, int]:
    end = pos + 1 + staged[pos]
    if end > len(staged):
        raise StagedRecordError("a staged record's exchange or routing key runs past its end")
    raw = bytes(staged[pos + 1 : end])
    try:
        return raw.decode("utf-8"), end
    except UnicodeDecodeError:
        return raw, end  # as pika gives a short string that is not UTF-8
