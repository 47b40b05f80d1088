"""The publish-time fast path: a record's JSON straight to what pika sends, without the typed model.

Why: building ``HeaderValue`` objects and checking every field costs more
per message than publishing it (profiled: about 130 us of 1 KiB record
against about 240 us for the publish). At publish time the segment's bytes
are those the plan verified record by record with the strict codec (their
SHA-256 is checked again), so here the JSON is trusted, and the header
table is written from its serde form directly to AMQP wire bytes by
``field_table.encode_json_table``, the same encoder that writes the decoded
form (a test holds the two to byte equality over generated tables).

Routing headers: RabbitMQ's sender-selected distribution routes a published
message to every queue named in its ``CC`` and ``BCC`` headers as well as by
its routing key. A restore must change only the queues its plan names, so
:data:`ROUTING_HEADERS` are left out of what is published, always, in every
mode; the record keeps them, so the backup stays faithful and a later reader
sees what the source held (docs/operations.md, "Headers the broker acts on").
The headers a broker adds on delivery (:mod:`airflow_rbak.codec.broker_headers`)
are broker state: a record made by an earlier version, or by another writer, may
still hold them, and they are left out too, for the queue type that adds them.

A record body first, as the writer puts it, is read in two parts: the body
array in C, the rest by orjson. A second ``body`` key in the rest is refused
(:class:`RecordError`), never published: the strict reader that verified the
segment refuses any repeated key, so it cannot have passed verification.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import orjson

from airflow_rbak.broker.amqp_types import TypedBasicProperties
from airflow_rbak.codec.broker_headers import broker_headers
from airflow_rbak.codec.constants import DEFAULT_MAX_DECOMPRESSED_BYTES
from airflow_rbak.codec.errors import RecordDecodeError
from airflow_rbak.codec.field_table import encode_json_table
from airflow_rbak.codec.properties import PIKA_NAMES, PROPERTY_NAMES
from airflow_rbak.codec.property_list import encode_property_list
from airflow_rbak.codec.records import RecordError
from airflow_rbak.codec.segment import decode_payload, iter_payload

try:  # the codec's optional C accelerator for the body's byte array
    from airflow_rbak.codec._speedups import parse_byte_array
except ImportError:  # pragma: no cover - without a compiler the generic path is used
    parse_byte_array = None

_USER_ID = PIKA_NAMES.index("user_id")
_BODY_FIRST = b'{"body":['
#: Header names the broker routes by at publish (case-sensitive, as RabbitMQ matches them): never published.
ROUTING_HEADERS = frozenset({"CC", "BCC"})


class WireRecord:
    """What publishing needs of one record: body, route, stamps, and its properties as values and header-table bytes.

    The publish writes the property list straight from ``values`` and ``raw_headers``
    (:meth:`property_list`); pika's properties object is built only where one is read (:attr:`properties`)."""

    __slots__ = ("body", "values", "raw_headers", "exchange", "routing_key", "delivery_tag", "backed_up_at",
                 "source_vhost", "_props")

    def __init__(self, body: bytes, values: tuple[Any, ...], raw_headers: bytes | None, exchange: str,
                 routing_key: str, delivery_tag: int, backed_up_at: int, source_vhost: str = "") -> None:
        self.body, self.values, self.raw_headers, self.exchange, self.routing_key = (
            body, values, raw_headers, exchange, routing_key)
        self.delivery_tag, self.backed_up_at, self.source_vhost = delivery_tag, backed_up_at, source_vhost
        self._props: TypedBasicProperties | None = None

    @property
    def properties(self) -> TypedBasicProperties:
        """The record's properties as pika's object (built on first read)."""
        if self._props is None:
            self._props = TypedBasicProperties(**dict(zip(PIKA_NAMES, self.values)), raw_headers=self.raw_headers)
        return self._props

    @property
    def user_id(self) -> str | None:
        """The record's ``user_id`` property (RabbitMQ refuses a publish whose user_id is not the connection's user)."""
        return self.values[_USER_ID]

    def property_list(self, strip_user_id: bool = False) -> bytes:
        """The content header's property list to publish: what ``properties.encode()`` writes, ``user_id`` left out
        when ``strip_user_id``."""
        values = self.values
        if strip_user_id and values[_USER_ID] is not None:
            values = values[:_USER_ID] + (None,) + values[_USER_ID + 1:]
        return encode_property_list(values, self.raw_headers)


def left_out_headers(queue_type: str) -> frozenset[str]:
    """The headers never published for a record of a ``queue_type`` queue: routing headers and broker state."""
    return ROUTING_HEADERS | broker_headers(queue_type)


def iter_wire_records(data: bytes, name: str, cap: int = DEFAULT_MAX_DECOMPRESSED_BYTES,
                      left_out: frozenset[str] = ROUTING_HEADERS) -> Iterator[WireRecord]:
    """Every record of an already verified segment, in order, as :class:`WireRecord`."""
    header, payload = decode_payload(data, name, cap)
    for index, raw in enumerate(iter_payload(payload, header.record_count, name)):
        try:
            record = wire_record(raw, left_out)
        except RecordError as exc:
            raise RecordDecodeError(f"record {index}: {exc}", segment=name) from None
        yield record


def wire_record(raw: bytes | memoryview, left_out: frozenset[str] = ROUTING_HEADERS) -> WireRecord:
    """One record's JSON as a :class:`WireRecord` (the body array parsed in C when the accelerator is built), without
    the headers named in ``left_out``."""
    obj: dict[str, Any] | None = None
    if parse_byte_array is not None and raw[:9] == _BODY_FIRST:
        try:
            body, end = parse_byte_array(raw, len(_BODY_FIRST))
            obj = orjson.loads(b"{" + bytes(raw[end + 1:]))
        except ValueError:  # valid JSON the C parser does not take (``[]``, spaces): the generic path reads it
            obj = None
        if obj is not None and "body" in obj:  # two bodies: which one would be published is not what was verified
            raise RecordError("record has more than one 'body' key")
    if obj is None:
        obj = orjson.loads(raw)
        body = bytes(obj["body"]) if obj["body"] else b""
    p = obj["properties"]
    headers = obj["headers"]
    if headers:
        headers = [pair for pair in headers if pair[0] not in left_out]
    return WireRecord(body, tuple(map(p.get, PROPERTY_NAMES)), encode_json_table(headers) if headers else None,
                      obj["exchange"], obj["routing_key"], obj["delivery_tag"], obj["backed_up_at"], obj["source_vhost"])
