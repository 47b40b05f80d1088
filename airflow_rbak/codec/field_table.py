"""AMQP 0-9-1 field tables (message headers) <-> typed header values, with every wire type kept.

pika's own table decoder loses information (it returns ``float``/``double``
fields as ``int``, and every integer width as a plain ``int``), so header
tables are decoded here from the wire bytes (for the property list's decoder,
``property_list.py``), and encoded here: the one AMQP table encoder, for typed
values and for their JSON form alike.

Wire type -> spec variant (``airflow_rbak.codec.headers``):

=====================  ==========================================================
``t`` boolean          ``Bool``
``b`` i8, ``B`` u8,    ``Short`` (value exact; the wire width is widened)
``s``/``U`` i16
``u`` u16, ``I`` i32,  ``Long`` (value exact; the wire width is widened)
``i`` u32, ``l``/``L``
i64
``f`` float32          ``Float`` (bit-exact, shortest decimal form)
``d`` float64          ``Double``
``T`` timestamp        ``Timestamp`` (seconds, u64)
``S`` long string      ``LongString`` when UTF-8
``x`` byte array       ``Bytes``
``F`` table            ``Table`` (order and duplicate keys kept)
``A`` array            ``Array``
``V`` void             ``Void``
``D`` decimal          ``Table [["rbak:type", ShortString "decimal"],
                       ["scale", Short], ["value", Long]]``: value = value * 10^-scale
non-UTF-8 ``S``        ``Table [["rbak:type", ShortString "longstr"], ["value", Bytes]]``
=====================  ==========================================================

The two tagged tables are the only extensions: the spec has no decimal and no
binary long string. :func:`encode_table` turns them back into ``D`` and ``S``,
so a capture -> restore round trip republishes identical bytes for every type
but the widened integers. Integers are written back as ``s`` (Short) and
``l`` (Long), as RabbitMQ itself writes them.
"""

from __future__ import annotations

import functools
import math
import operator
import struct
from collections.abc import Callable
from datetime import datetime, timezone
from decimal import Decimal
from typing import Any

from airflow_rbak.codec.headers import MAX_DEPTH, HeaderValue
from airflow_rbak.exceptions import RbakError

TYPE_TAG = "rbak:type"
DECIMAL_TAG = "decimal"
BINARY_LONGSTR_TAG = "longstr"
_INT_FORMATS = {b"b": ">b", b"B": ">B", b"s": ">h", b"U": ">h", b"u": ">H", b"I": ">i", b"i": ">I", b"l": ">q", b"L": ">q"}
_SHORT_TAGS = (b"b", b"B", b"s", b"U")


class FieldTableError(RbakError, ValueError):
    """A header table on the wire is malformed or nested too deep."""


def decode_table(data: bytes | memoryview, offset: int = 0, depth: int = 0) -> tuple[tuple[tuple[str, HeaderValue], ...], int]:
    """Decode a length-prefixed field table at ``offset``; return its pairs and the offset after it.

    Tables and arrays nest at most as deep as a record's reader takes them (``headers.MAX_DEPTH``): what this
    accepts, a record can hold.
    """
    if depth >= MAX_DEPTH:
        raise FieldTableError(f"header table nested too deep (more than {MAX_DEPTH - 1} levels)")
    try:
        (size,) = struct.unpack_from(">I", data, offset)
        offset += 4
        end = offset + size
        if end > len(data):
            raise FieldTableError("header table runs past the end of its frame")
        pairs: list[tuple[str, HeaderValue]] = []
        while offset < end:
            klen = data[offset]
            key = bytes(data[offset + 1 : offset + 1 + klen]).decode("utf-8", "replace")
            value, offset = decode_value(data, offset + 1 + klen, depth)
            pairs.append((key, value))
    except (struct.error, IndexError):
        raise FieldTableError("header table is truncated") from None
    if offset != end:
        raise FieldTableError("header table length does not match its fields")
    return tuple(pairs), offset


def _trusted(kind: str, value: Any) -> HeaderValue:
    """A HeaderValue whose value the wire format already bounds (skips the constructor's check: hot path)."""
    hv = object.__new__(HeaderValue)
    object.__setattr__(hv, "kind", kind)
    object.__setattr__(hv, "value", value)
    return hv


@functools.lru_cache(maxsize=4096)
def _float32(bits: bytes) -> HeaderValue:
    # The shortest decimal of an f32 (what serde writes) costs up to nine round trips; a cache by bit pattern
    # makes a header that repeats across messages nearly free.
    return HeaderValue.float32(struct.unpack(">f", bits)[0])


#: Fixed-size scalars: tag -> (struct, size, variant).
_SCALARS: dict[int, tuple[struct.Struct, int, str]] = {
    **{
        tag[0]: (struct.Struct(fmt), struct.calcsize(fmt), "Short" if tag in _SHORT_TAGS else "Long")
        for tag, fmt in _INT_FORMATS.items()
    },
    ord("d"): (struct.Struct(">d"), 8, "Double"),
    ord("T"): (struct.Struct(">Q"), 8, "Timestamp"),
}
_U32 = struct.Struct(">I")
_VOID = HeaderValue.void()
_DECIMAL_TAG_VALUE = HeaderValue.short_string(DECIMAL_TAG)
_TRUE_VALUE, _FALSE_VALUE = HeaderValue.bool_(True), HeaderValue.bool_(False)


def decode_value(data: bytes | memoryview, offset: int, depth: int = 0) -> tuple[HeaderValue, int]:
    """Decode one tagged field value (see the module table)."""
    tag = data[offset]
    offset += 1
    scalar = _SCALARS.get(tag)
    if scalar is not None:
        fmt, size, kind = scalar
        return _trusted(kind, fmt.unpack_from(data, offset)[0]), offset + size
    if tag == 0x74:  # t
        return (_TRUE_VALUE if data[offset] else _FALSE_VALUE), offset + 1
    if tag == 0x66:  # f
        return _float32(bytes(data[offset : offset + 4])), offset + 4
    if tag == 0x56:  # V
        return _VOID, offset
    if tag == 0x44:  # D
        scale, raw = struct.unpack_from(">Bi", data, offset)
        return decimal_value(scale, raw), offset + 5
    if tag in (0x53, 0x78, 0x41):  # S x A
        (length,) = _U32.unpack_from(data, offset)
        start, end = offset + 4, offset + 4 + length
        if end > len(data):
            raise FieldTableError("header value runs past the table")
        if tag == 0x78:
            return _trusted("Bytes", bytes(data[start:end])), end
        if tag == 0x53:
            return _long_string(bytes(data[start:end])), end
        return _trusted("Array", tuple(_decode_array(data, start, end, depth + 1))), end
    if tag == 0x46:  # F
        pairs, end = decode_table(data, offset, depth + 1)
        return _trusted("Table", pairs), end
    raise FieldTableError(f"unknown header field type {bytes([tag])!r}")


def _decode_array(data: bytes | memoryview, offset: int, end: int, depth: int) -> list[HeaderValue]:
    if depth >= MAX_DEPTH:
        raise FieldTableError(f"header array nested too deep (more than {MAX_DEPTH - 1} levels)")
    values = []
    while offset < end:
        value, offset = decode_value(data, offset, depth)
        values.append(value)
    if offset != end:
        raise FieldTableError("header array length does not match its values")
    return values


def _long_string(raw: bytes) -> HeaderValue:
    try:
        return _trusted("LongString", raw.decode("utf-8"))
    except UnicodeDecodeError:
        return HeaderValue.table([(TYPE_TAG, HeaderValue.short_string(BINARY_LONGSTR_TAG)), ("value", HeaderValue.bytes_(raw))])


def decimal_value(scale: int, raw: int) -> HeaderValue:
    """The tagged-table form of an AMQP decimal ``raw * 10**-scale``."""
    return _trusted(
        "Table", ((TYPE_TAG, _DECIMAL_TAG_VALUE), ("scale", _trusted("Short", scale)), ("value", _trusted("Long", raw)))
    )


def _tag_of(value: HeaderValue) -> str | None:
    if value.kind == "Table" and value.value and value.value[0][0] == TYPE_TAG:
        return value.value[0][1].value
    return None


# The one encoder of AMQP field tables. It takes header values in either of their two forms, through a function
# that gives a node's (variant, value): typed ``HeaderValue``s (captured records, tests) and their serde JSON form
# (``"Void"`` or ``{variant: value}``, as a segment holds them; the publish fast path, ``restore/wire.py``), so the
# two can never write different bytes. Integers go out as ``s`` (Short) and ``l`` (Long), as RabbitMQ writes them.
_typed = operator.attrgetter("kind", "value")


def _json(node: Any) -> tuple[str, Any]:
    if node == "Void":
        return "Void", None
    ((kind, value),) = node.items()
    return kind, value


_ENCODED_SCALARS = {"Long": (b"l", struct.Struct(">q")), "Short": (b"s", struct.Struct(">h")),
                    "Timestamp": (b"T", struct.Struct(">Q")), "Float": (b"f", struct.Struct(">f")),
                    "Double": (b"d", struct.Struct(">d"))}


def _encode_value(node: Any, unpack: Callable[[Any], tuple[str, Any]]) -> bytes:
    kind, v = unpack(node)
    if kind in ("LongString", "ShortString"):
        raw = v.encode("utf-8")
        return b"S" + _U32.pack(len(raw)) + raw
    scalar = _ENCODED_SCALARS.get(kind)
    if scalar is not None:
        if kind in ("Float", "Double"):
            v = math.nan if v is None else float(v)  # the JSON form writes non-finite floats as null
        return scalar[0] + scalar[1].pack(v)
    if kind == "Bool":
        return b"t\x01" if v else b"t\x00"
    if kind == "Void":
        return b"V"
    if kind == "Bytes":
        return b"x" + _U32.pack(len(v)) + bytes(v)
    if kind == "Array":
        inner = b"".join(_encode_value(x, unpack) for x in v)
        return b"A" + _U32.pack(len(inner)) + inner
    tag = unpack(v[0][1])[1] if v and v[0][0] == TYPE_TAG else None
    if tag == DECIMAL_TAG:
        fields = {key: unpack(x)[1] for key, x in v}
        return struct.pack(">cBi", b"D", fields["scale"], fields["value"])
    if tag == BINARY_LONGSTR_TAG:
        raw = bytes(unpack(dict(v)["value"])[1])
        return b"S" + _U32.pack(len(raw)) + raw
    return b"F" + _encode_table(v, unpack)


def _encode_table(pairs: Any, unpack: Callable[[Any], tuple[str, Any]]) -> bytes:
    body = bytearray()
    for key, value in pairs:
        raw = key.encode("utf-8")
        body += bytes([len(raw)]) + raw + _encode_value(value, unpack)
    return _U32.pack(len(body)) + bytes(body)


def encode_value(value: HeaderValue) -> bytes:
    """Encode one value for the wire (inverse of :func:`decode_value`, integers as ``s``/``l``)."""
    return _encode_value(value, _typed)


def encode_table(pairs: tuple[tuple[str, HeaderValue], ...] | list[tuple[str, HeaderValue]]) -> bytes:
    """Encode a field table with its u32 length prefix."""
    return _encode_table(pairs, _typed)


def encode_json_table(pairs: list[list[Any]]) -> bytes:
    """Encode a header table in the spec's JSON form (``[[key, {"Long": 1}], ...]``) exactly as :func:`encode_table`
    encodes its typed form; the length prefix included."""
    return _encode_table(pairs, _json)


def plain_value(value: HeaderValue) -> Any:
    """A header value as pika would give it (int, str, float, bytes, Decimal, dict, list, datetime)."""
    kind, v = value.kind, value.value
    if kind == "Array":
        return [plain_value(x) for x in v]
    if kind == "Timestamp":
        try:
            return datetime.fromtimestamp(v, timezone.utc)
        except (OverflowError, OSError, ValueError):
            return v
    if kind != "Table":
        return v
    tag, fields = _tag_of(value), dict(v)
    if tag == DECIMAL_TAG:
        return Decimal(fields["value"].value).scaleb(-fields["scale"].value)
    if tag == BINARY_LONGSTR_TAG:
        return fields["value"].value
    return plain_table(v)


def plain_table(pairs: tuple[tuple[str, HeaderValue], ...]) -> dict[str, Any]:
    """A typed table as a plain dict (the last of duplicate keys wins, as in pika)."""
    return {k: plain_value(v) for k, v in pairs}

