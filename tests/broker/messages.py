"""Deterministic test messages: their exact wire form, and the record JSON a capture must produce.

Both are written here by hand from the same few values, independently of
``amqp_types`` and the codec: the wire bytes follow AMQP 0-9-1, the expected
JSON follows the RBAK format (docs/format.md). So the broker tests compare what a capture stored
against an oracle it did not compute, byte for byte (every body byte, every
property, every typed header), at a few microseconds a message.
"""

from __future__ import annotations

import struct

import numpy
import orjson
from pika import spec

_PATTERN = bytes(range(256)) * 20
MAX_BODY = len(_PATTERN) - 256
_TAG_MARK = b',"delivery_tag":'


def body_of(i: int, size: int) -> bytes:
    """A deterministic body of ``size`` bytes: message ``i``'s number, then a run of every byte value."""
    if size > MAX_BODY:
        raise ValueError(f"test bodies are at most {MAX_BODY} bytes")
    start = (i * 7) % 256
    return (struct.pack(">Q", i) + _PATTERN[start : start + size])[:size]


def _short(text: str) -> bytes:
    raw = text.encode()
    return bytes([len(raw)]) + raw


def _field(key: str, tag: bytes, payload: bytes = b"") -> bytes:
    return _short(key) + tag + payload


def _long_string(text: str) -> bytes:
    raw = text.encode()
    return struct.pack(">I", len(raw)) + raw


def _sized(body: bytes) -> bytes:
    return struct.pack(">I", len(body)) + body


def _header_fields(i: int) -> list[tuple[str, bytes]]:
    nested = _sized(_field("list", b"A", _sized(b"l" + struct.pack(">q", i) + b"V" + b"S" + _long_string("x"))))
    return [(f[1 : 1 + f[0]].decode(), f) for f in [
        _field("seq", b"l", struct.pack(">q", i)),
        _field("small", b"s", struct.pack(">h", i % 30000)),
        _field("u32", b"i", struct.pack(">I", 4_000_000_000 + i)),
        _field("name", b"S", _long_string(f"msg-{i}")),
        _field("ok", b"t", bytes([i % 2 == 0])),
        _field("ratio", b"d", struct.pack(">d", i / 3)),
        _field("f32", b"f", struct.pack(">f", (i % 1000) / 8)),
        _field("blob", b"x", _sized(bytes([i % 256, 0, 255]))),
        _field("when", b"T", struct.pack(">Q", 1_700_000_000 + i)),
        _field("nested", b"F", nested),
        _field("price", b"D", struct.pack(">Bi", 2, i)),
    ]]


#: RabbitMQ 3.10 streams drop table and array headers, refuse decimals (541 INTERNAL_ERROR closes the
#: connection), drop cluster_id, and return headers sorted by key (as RabbitMQ 3.10 does).
_NOT_IN_STREAMS = ("nested", "price")


def header_table(i: int, stream: bool = False) -> bytes:
    """Message ``i``'s header table on the wire: one field of most AMQP types, values varying with ``i``."""
    fields = _header_fields(i)
    if stream:
        fields = sorted((k, f) for k, f in fields if k not in _NOT_IN_STREAMS)
    return _sized(b"".join(f for _, f in fields))


def expected_headers(i: int, stream: bool = False, sorted_headers: bool = False, bytes_as_long_string: bool = False) -> list:
    """The spec-000 JSON of :func:`header_table` (unsigned and 8-bit integers widen; decimal is a tagged table);
    ``sorted_headers``: in key order, as a broker that re-encodes the table delivers it; ``bytes_as_long_string``: a
    byte-array header delivered as a long string of the same bytes, as RabbitMQ 4.x streams do (tests/broker/behaviour.py)."""
    headers = _expected_headers(i)
    if bytes_as_long_string:
        headers = [[k, long_string_json(bytes(v["Bytes"]))] if isinstance(v, dict) and "Bytes" in v else [k, v] for k, v in headers]
    if stream:
        return sorted(h for h in headers if h[0] not in _NOT_IN_STREAMS)
    return sorted(headers) if sorted_headers else headers


def long_string_json(raw: bytes) -> object:
    """The spec-000 JSON of a long string header: its text, or a tagged table holding bytes that are not UTF-8."""
    try:
        return {"LongString": raw.decode("utf-8")}
    except UnicodeDecodeError:
        return {"Table": [["rbak:type", {"ShortString": "longstr"}], ["value", {"Bytes": list(raw)}]]}


def _expected_headers(i: int) -> list:
    return [
        ["seq", {"Long": i}],
        ["small", {"Short": i % 30000}],
        ["u32", {"Long": 4_000_000_000 + i}],
        ["name", {"LongString": f"msg-{i}"}],
        ["ok", {"Bool": i % 2 == 0}],
        ["ratio", {"Double": i / 3}],
        ["f32", {"Float": (i % 1000) / 8}],
        ["blob", {"Bytes": [i % 256, 0, 255]}],
        ["when", {"Timestamp": 1_700_000_000 + i}],
        ["nested", {"Table": [["list", {"Array": [{"Long": i}, "Void", {"LongString": "x"}]}]]}],
        ["price", {"Table": [["rbak:type", {"ShortString": "decimal"}], ["scale", {"Short": 2}], ["value", {"Long": i}]]}],
    ]


def _property_values(i: int, user: str, stream: bool = False) -> dict:
    return {
        "content_type": "application/octet-stream", "content_encoding": "identity", "delivery_mode": 2,
        "priority": i % 10, "correlation_id": f"c-{i}", "reply_to": "replies", "expiration": "86400000",
        "message_id": f"m-{i}", "timestamp": 1_700_000_000 + i, "type_field": "test.event", "user_id": user,
        "app_id": "rbak-tests", "cluster_id": None if stream else "c1",
    }


def wire_properties(i: int, user: str = "guest", stream: bool = False) -> bytes:
    """Message ``i``'s content-header property list: all 14 basic properties set (flags 0xFFFC; no cluster_id for streams)."""
    p = _property_values(i, user, stream)
    return b"".join([
        struct.pack(">H", 0xFFF8 if stream else 0xFFFC), _short(p["content_type"]), _short(p["content_encoding"]),
        header_table(i, stream), struct.pack(">BB", p["delivery_mode"], p["priority"]), _short(p["correlation_id"]),
        _short(p["reply_to"]), _short(p["expiration"]), _short(p["message_id"]), struct.pack(">Q", p["timestamp"]),
        _short(p["type_field"]), _short(p["user_id"]), _short(p["app_id"]), b"" if stream else _short(p["cluster_id"]),
    ])


class WireProperties(spec.BasicProperties):
    """Properties pika sends exactly as given (pika only calls ``encode``)."""

    def __init__(self, encoded: bytes) -> None:
        self.encoded = encoded

    def encode(self) -> list[bytes]:
        return [self.encoded]


def expected_prefix(i: int, size: int, routing_key: str, exchange: str = "", user: str = "guest", stream: bool = False,
                    sorted_headers: bool = False, bytes_as_long_string: bool = False) -> bytes:
    """The start of message ``i``'s record JSON, up to the delivery state (``delivery_tag`` onwards varies);
    ``sorted_headers`` and ``bytes_as_long_string`` as in :func:`expected_headers`."""
    head = {
        "body": numpy.frombuffer(body_of(i, size), numpy.uint8) if size else None,
        "properties": _property_values(i, user, stream),
        "headers": expected_headers(i, stream, sorted_headers, bytes_as_long_string),
        "exchange": exchange,
        "routing_key": routing_key,
    }
    return orjson.dumps(head, option=orjson.OPT_SERIALIZE_NUMPY)[:-1]


def split_record(raw: bytes) -> tuple[bytes, dict]:
    """A record's JSON as (prefix before ``delivery_tag``, the parsed delivery state and source fields)."""
    cut = raw.index(_TAG_MARK)
    return raw[:cut], orjson.loads(b"{" + raw[cut + 1 :])


def sequence_of(raw: bytes) -> int:
    """Message number of a staged record (its body's first 8 bytes), read from the JSON's start."""
    numbers = raw[len(b'{"body":[') : raw.index(b"]")].split(b",", 8)[:8]
    return int.from_bytes(bytes(int(n) for n in numbers), "big")
