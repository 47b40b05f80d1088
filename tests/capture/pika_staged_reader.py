"""The staged-record reader as it was before the codec read staged records, on pika: the oracle of the codec's.

Until then, encode decoded a staged delivery's property list into pika's
``BasicProperties`` (flags by pika's ``FLAG_`` constants, the header table
typed, pika's own decoder after a continuation flag word) and built the
record JSON from pika's attributes (``capture/delivery_json.py``). Its code is
kept here as it was, and only here: the tests hold
``codec.staged_records.read_staged`` to its bytes, and
``bench/staged_delivery.py`` to its speed.
"""

from __future__ import annotations

import functools
import operator
import struct
from collections.abc import Sequence
from typing import Any, NamedTuple

from pika import spec

from airflow_rbak.broker.amqp_types import TypedBasicProperties, headers_of
from airflow_rbak.codec.field_table import decode_table
from airflow_rbak.codec.properties import NUMBER_NAMES, OCTET, PIKA_NAMES, PROPERTIES, PROPERTY_NAMES, SHORT_STRING, TIMESTAMP
from airflow_rbak.codec.records import encode_record_object, record_object
from airflow_rbak.codec.staged_records import DROPPED_HEADERS, FORMAT, HEAD, StagedRecordError
from tests.broker.record_reference import property_text

_P = spec.BasicProperties
_WIRE_KINDS = {SHORT_STRING: "s", OCTET: "o", TIMESTAMP: "T"}
_PROPERTY_WIRE = tuple(sorted(
    [(getattr(_P, f"FLAG_{p.pika_name.upper()}"), p.pika_name, _WIRE_KINDS[p.kind]) for p in PROPERTIES]
    + [(_P.FLAG_HEADERS, "headers", "F")],
    key=lambda wire: -wire[0],
))
_ABSENT = dict.fromkeys(PIKA_NAMES)
_U16 = struct.Struct(">H")
_U64 = struct.Struct(">Q")
_U32 = struct.Struct("<I")
_PIKA_VALUES = operator.attrgetter(*PIKA_NAMES)


@functools.lru_cache(maxsize=1024)
def _present(flags: int) -> tuple[tuple[str, str], ...]:
    return tuple((name, kind) for flag, name, kind in _PROPERTY_WIRE if flags & flag)


class PikaDecodedProperties(TypedBasicProperties):
    """pika's BasicProperties with the header table typed, decoded as encode decoded them."""

    def decode(self, encoded: bytes, offset: int = 0) -> PikaDecodedProperties:
        (flags,) = _U16.unpack_from(encoded, offset)
        if flags & 1:  # a continuation flag word: pika decoded these, its header table untyped
            spec.BasicProperties.decode(self, encoded, offset)
            self.typed_headers = None
            return self
        values = self.__dict__
        values.update(_ABSENT)
        typed = None
        pos = offset + 2
        for name, kind in _present(flags):
            if kind == "s":
                end = pos + 1 + encoded[pos]
                raw = encoded[pos + 1 : end]
                try:
                    values[name] = raw.decode("utf-8")
                except UnicodeDecodeError:
                    values[name] = bytes(raw)
                pos = end
            elif kind == "o":
                values[name] = encoded[pos]
                pos += 1
            elif kind == "T":
                (values[name],) = _U64.unpack_from(encoded, pos)
                pos += 8
            else:
                typed, pos = decode_table(encoded, pos)
        values["typed_headers"] = typed
        if typed is None:
            values["_plain_headers"] = None
        else:  # pika's plain view, built from the typed table when read
            values.pop("_plain_headers", None)
        return self


class _Delivery(NamedTuple):
    exchange: Any
    routing_key: Any
    delivery_tag: int
    redelivered: bool


def pika_read_staged(staged: bytes | memoryview, queue: str, vhost: str) -> tuple[bytes, int]:
    """A staged record's JSON and ``backed_up_at``, as encode read it on pika."""
    fmt, dropped, redelivered, stamp, tag = HEAD.unpack_from(staged)
    if fmt != FORMAT or dropped >= len(DROPPED_HEADERS):
        raise StagedRecordError(f"format {fmt}, header code {dropped}")
    try:
        pos = HEAD.size
        exchange, pos = _short(staged, pos)
        routing_key, pos = _short(staged, pos)
        (length,) = _U32.unpack_from(staged, pos)
        pos += 4
        if pos + length > len(staged):
            raise StagedRecordError("a staged record's property list runs past its end")
        props = PikaDecodedProperties().decode(bytes(staged[pos : pos + length]))
        body = bytes(staged[pos + length :])
    except (struct.error, IndexError) as exc:
        raise StagedRecordError(f"a staged record is truncated ({exc})") from None
    delivery = _Delivery(exchange, routing_key, tag, bool(redelivered))
    return _delivery_record_json(delivery, props, body, queue, vhost, stamp, DROPPED_HEADERS[dropped]), stamp


def _delivery_record_json(method: _Delivery, props: spec.BasicProperties, body: bytes, queue: str, vhost: str,
                          backed_up_at: int, drop_headers: frozenset[str]) -> bytes:
    headers = [[key, value.to_json()] for key, value in headers_of(props) if key not in drop_headers]
    values: Sequence[Any] = _PIKA_VALUES(props)
    if bytes in map(type, values):
        values = [v if name in NUMBER_NAMES else property_text(v) for name, v in zip(PROPERTY_NAMES, values)]
    return encode_record_object(record_object(
        body, dict(zip(PROPERTY_NAMES, values)), headers, method.exchange, method.routing_key, method.delivery_tag,
        bool(method.redelivered), backed_up_at, queue, vhost,
    ))


def _short(staged: bytes | memoryview, pos: int) -> tuple[str | bytes, int]:
    end = pos + 1 + staged[pos]
    if end > len(staged):
        raise StagedRecordError("a staged record's exchange or routing key runs past its end")
    raw = bytes(staged[pos + 1 : end])
    try:
        return raw.decode("utf-8"), end
    except UnicodeDecodeError:
        return raw, end
