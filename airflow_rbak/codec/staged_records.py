"""The staged record: a delivery as the capture received it, made into its record JSON by the encode step.

A capture holds every message it reads until it gives them all back, and on a
small broker host its consuming thread shares the cores with the broker, so it
stages each delivery as it came (``capture/staged_delivery.py`` writes it from
pika's objects with :func:`staged_record`): its delivery fields, the content
header's property list undecoded and the body. The encode step, on Spark
executors, reads it here with nothing but the codec: the property list by
``property_list.py``, the JSON by ``records.record_object``, exactly the bytes
the record had when the capture built it on receipt. The C accelerator writes
the same JSON (most of the encode's per-message time was here), a header table
read by this module's decoder, and leaves any record it does not read to the
Python reader.

One staged record (little-endian)::

    u8  format (1)     u8  dropped headers (an index in DROPPED_HEADERS)
    u8  redelivered    u64 backed_up_at (ms)      u64 delivery tag (a stream's: the offset)
    u8  exchange length, exchange (UTF-8)         u8  routing key length, routing key (UTF-8)
    u32 property list length, property list (AMQP 0-9-1 basic content header, flags first)
    body (the rest)
"""

from __future__ import annotations

import struct
from typing import Any

import orjson

from airflow_rbak.codec.broker_headers import broker_headers
from airflow_rbak.codec.field_table import FieldTableError, decode_table
from airflow_rbak.codec.headers import headers_to_json
from airflow_rbak.codec.properties import PROPERTY_NAMES
from airflow_rbak.codec.property_list import PropertyListError, decode_property_list
from airflow_rbak.codec.records import accelerated_staged, configure_staged, encode_record_object, record_object
from airflow_rbak.exceptions import RbakError

FORMAT = 1
HEAD = struct.Struct("<BBBQQ")
_U32 = struct.Struct("<I")
#: Broker-owned headers that are state, not part of the published message (``broker_headers.BROKER_HEADERS``): a
#: quorum queue's counters...
QUORUM_BROKER_HEADERS = broker_headers("quorum")
#: ... and the offset a stream adds to each delivery.
STREAM_BROKER_HEADERS = broker_headers("stream")
#: The broker-owned headers a record leaves out, by the code a staged record carries: a code names a queue type, so
#: a staged record written before a header joined the table is read without it too.
DROPPED_HEADERS: tuple[frozenset[str], ...] = (frozenset(), QUORUM_BROKER_HEADERS, STREAM_BROKER_HEADERS)


def dropped_code(queue_type: str) -> int:
    """The staged record's code for the broker-owned headers a queue of ``queue_type`` adds on delivery."""
    return DROPPED_HEADERS.index(broker_headers(queue_type))
_NO_PROPERTIES = dict.fromkeys(PROPERTY_NAMES)


class StagedRecordError(RbakError, ValueError):
    """A staged record cannot be read (staging written by another version, or damaged) or written."""


def staged_record(
    exchange: bytes, routing_key: bytes, properties: bytes, body: bytes, backed_up_at: int, delivery_tag: int,
    redelivered: bool, dropped: int,
) -> bytes:
    """One delivery's staged record; ``dropped`` indexes :data:`DROPPED_HEADERS` (runs once per message)."""
    if len(exchange) > 255 or len(routing_key) > 255:
        raise StagedRecordError(f"a delivery's exchange or routing key is {max(len(exchange), len(routing_key))} bytes; "
                                f"AMQP allows 255")
    return b"".join((
        HEAD.pack(FORMAT, dropped, 1 if redelivered else 0, backed_up_at, delivery_tag),
        bytes((len(exchange),)), exchange, bytes((len(routing_key),)), routing_key, _U32.pack(len(properties)),
        properties, body,
    ))


def read_staged(staged: bytes | memoryview, queue: str, vhost: str) -> tuple[bytes, int]:
    """A staged record's JSON, exactly as the capture would have written it on receipt, and its ``backed_up_at``.

    :class:`StagedRecordError` says what is wrong with one that cannot be read, and nothing else is raised. The
    C accelerator writes it when it can and leaves the rest to :func:`read_staged_here`.
    """
    if accelerated_staged is not None and (made := accelerated_staged(staged, queue, vhost)) is not None:
        return made
    return read_staged_here(staged, queue, vhost)


def read_staged_here(staged: bytes | memoryview, queue: str, vhost: str) -> tuple[bytes, int]:
    """:func:`read_staged` in Python: the reference the accelerator is held to."""
    size = len(staged)
    if size < HEAD.size:
        raise StagedRecordError(f"a staged record of {size} bytes is shorter than its header")
    fmt, dropped, redelivered, stamp, tag = HEAD.unpack_from(staged)
    if fmt != FORMAT or dropped >= len(DROPPED_HEADERS):
        raise _unknown(fmt, dropped)
    exchange, pos = _name(staged, HEAD.size, "exchange")
    routing_key, pos = _name(staged, pos, "routing key")
    if pos + 4 > size:
        raise StagedRecordError(f"a staged record of {size} bytes ends before its property list")
    (length,) = _U32.unpack_from(staged, pos)
    start, end = pos + 4, pos + 4 + length
    if end > size:
        raise StagedRecordError(f"a staged record's property list of {length} bytes runs past its end")
    properties: dict[str, Any] = _NO_PROPERTIES.copy()
    try:
        typed = decode_property_list(staged[start:end], properties, PROPERTY_NAMES, _replaced)
    except (PropertyListError, FieldTableError) as exc:
        raise StagedRecordError(f"a staged record's property list: {exc}") from None
    headers = headers_to_json(typed, DROPPED_HEADERS[dropped]) if typed else []
    record = record_object(staged[end:], properties, headers, exchange, routing_key, tag, bool(redelivered), stamp,
                           queue, vhost)
    return encode_record_object(record), stamp


def _headers_json(properties: bytes, pos: int, dropped: int) -> tuple[bytes, int]:
    """The header table at ``pos`` of a property list as its record JSON, and the offset after it: what the C
    accelerator calls, so that a table is read by one decoder only (the C code writes the rest of the record)."""
    typed, end = decode_table(properties, pos)
    return orjson.dumps(headers_to_json(typed, DROPPED_HEADERS[dropped]) if typed else []), end


if configure_staged is not None:
    configure_staged(_headers_json)


def _unknown(fmt: int, dropped: int) -> StagedRecordError:
    if fmt == ord("{"):
        return StagedRecordError("a staged record is JSON: this staging was written by an older airflow-rbak; "
                                 "encode it with that version, or take a new backup (docs/operations.md)")
    return StagedRecordError(f"a staged record has format {fmt} and header code {dropped}; this version reads format "
                             f"{FORMAT} with codes below {len(DROPPED_HEADERS)}")


def _name(staged: bytes | memoryview, pos: int, what: str) -> tuple[str, int]:
    """The exchange or routing key at ``pos`` and the offset after it."""
    end = pos + 1 + staged[pos] if pos < len(staged) else pos + 1
    if end > len(staged):
        raise StagedRecordError(f"a staged record's {what} runs past its end")
    try:
        return str(staged[pos + 1 : end], "utf-8"), end
    except UnicodeDecodeError:
        raise StagedRecordError(f"a staged delivery's {what} is not UTF-8, and a record holds it as text") from None


def _replaced(raw: bytes | memoryview) -> str:
    """A short-string property that is not UTF-8, as a record holds it: text, U+FFFD for each bad sequence."""
    return str(raw, "utf-8", "replace")
