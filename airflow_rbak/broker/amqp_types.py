"""AMQP 0-9-1 properties and header tables <-> BackupRecord, with every wire type kept.

pika's own table decoder loses information (it returns ``float``/``double``
fields as ``int``, and every integer width as a plain ``int``), so header
tables are decoded here from the wire bytes, and
:class:`TypedBasicProperties` (registered as pika's class for
``basic`` content headers) keeps the typed result beside pika's.

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
import struct
from datetime import datetime, timezone
from decimal import Decimal
from typing import Any

from pika import spec

from airflow_rbak.codec.headers import HeaderValue
from airflow_rbak.codec.records import BackupProperties, BackupRecord

TYPE_TAG = "rbak:type"
DECIMAL_TAG = "decimal"
BINARY_LONGSTR_TAG = "longstr"
_INT_FORMATS = {b"b": ">b", b"B": ">B", b"s": ">h", b"U": ">h", b"u": ">H", b"I": ">i", b"i": ">I", b"l": ">q", b"L": ">q"}
_SHORT_TAGS = (b"b", b"B", b"s", b"U")
_MAX_DEPTH = 64


class FieldTableError(ValueError):
    """A header table on the wire is malformed or nested too deep."""


def decode_table(data: bytes | memoryview, offset: int = 0, depth: int = 0) -> tuple[tuple[tuple[str, HeaderValue], ...], int]:
    """Decode a length-prefixed field table at ``offset``; return its pairs and the offset after it."""
    if depth > _MAX_DEPTH:
        raise FieldTableError("header table nested too deep")
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
    **{tag[0]: (struct.Struct(fmt), struct.calcsize(fmt), "Short" if tag in _SHORT_TAGS else "Long") for tag, fmt in _INT_FORMATS.items()},
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
    if depth > _MAX_DEPTH:
        raise FieldTableError("header array nested too deep")
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
    return _trusted("Table", ((TYPE_TAG, _DECIMAL_TAG_VALUE), ("scale", _trusted("Short", scale)), ("value", _trusted("Long", raw))))


def _tag_of(value: HeaderValue) -> str | None:
    if value.kind == "Table" and value.value and value.value[0][0] == TYPE_TAG:
        return value.value[0][1].value
    return None


def encode_value(value: HeaderValue) -> bytes:
    """Encode one value for the wire (inverse of :func:`decode_value`, integers as ``s``/``l``)."""
    kind, v = value.kind, value.value
    if kind in ("LongString", "ShortString"):
        raw = v.encode("utf-8")
        return b"S" + struct.pack(">I", len(raw)) + raw
    simple = {"Long": ">cq", "Short": ">ch", "Bool": ">cB", "Timestamp": ">cQ", "Float": ">cf", "Double": ">cd"}
    tags = {"Long": b"l", "Short": b"s", "Bool": b"t", "Timestamp": b"T", "Float": b"f", "Double": b"d"}
    if kind in simple:
        return struct.pack(simple[kind], tags[kind], int(v) if kind == "Bool" else v)
    if kind == "Void":
        return b"V"
    if kind == "Bytes":
        return b"x" + struct.pack(">I", len(v)) + v
    if kind == "Array":
        inner = b"".join(encode_value(x) for x in v)
        return b"A" + struct.pack(">I", len(inner)) + inner
    tag = _tag_of(value)
    fields = dict(v)
    if tag == DECIMAL_TAG:
        return struct.pack(">cBi", b"D", fields["scale"].value, fields["value"].value)
    if tag == BINARY_LONGSTR_TAG:
        raw = fields["value"].value
        return b"S" + struct.pack(">I", len(raw)) + raw
    return b"F" + encode_table(v)


def encode_table(pairs: tuple[tuple[str, HeaderValue], ...] | list[tuple[str, HeaderValue]]) -> bytes:
    """Encode a field table with its u32 length prefix."""
    body = bytearray()
    for key, value in pairs:
        raw = key.encode("utf-8")
        body += bytes([len(raw)]) + raw + encode_value(value)
    return struct.pack(">I", len(body)) + bytes(body)


_P = spec.BasicProperties
#: The basic property list in wire order: (presence flag, attribute, wire type). ``s`` short string,
#: ``o`` octet, ``T`` u64 timestamp, ``F`` field table.
_PROPERTY_WIRE = (
    (_P.FLAG_CONTENT_TYPE, "content_type", "s"), (_P.FLAG_CONTENT_ENCODING, "content_encoding", "s"),
    (_P.FLAG_HEADERS, "headers", "F"), (_P.FLAG_DELIVERY_MODE, "delivery_mode", "o"), (_P.FLAG_PRIORITY, "priority", "o"),
    (_P.FLAG_CORRELATION_ID, "correlation_id", "s"), (_P.FLAG_REPLY_TO, "reply_to", "s"),
    (_P.FLAG_EXPIRATION, "expiration", "s"), (_P.FLAG_MESSAGE_ID, "message_id", "s"), (_P.FLAG_TIMESTAMP, "timestamp", "T"),
    (_P.FLAG_TYPE, "type", "s"), (_P.FLAG_USER_ID, "user_id", "s"), (_P.FLAG_APP_ID, "app_id", "s"),
    (_P.FLAG_CLUSTER_ID, "cluster_id", "s"),
)
_ABSENT = {name: None for _flag, name, _kind in _PROPERTY_WIRE if name != "headers"}
#: What pika's ``__init__`` leaves without arguments (pika builds each incoming instance that way).
_NO_ARGUMENTS = {**_ABSENT, "_plain_headers": None}


@functools.lru_cache(maxsize=1024)
def _present(flags: int) -> tuple[tuple[str, str], ...]:
    """The (attribute, wire type) of each property a flag word announces, in wire order."""
    return tuple((name, kind) for flag, name, kind in _PROPERTY_WIRE if flags & flag)
_U16 = struct.Struct(">H")
_U64 = struct.Struct(">Q")


class TypedBasicProperties(spec.BasicProperties):
    """pika's BasicProperties plus ``typed_headers``: the header table decoded without loss.

    The table is decoded once, by :func:`decode_table`, never by pika: pika's
    decoder loses types, costs as much again per message, and raises
    ``OverflowError`` on a timestamp past year 9999 (one such message would
    stop every capture of its queue). ``headers`` is a plain-dict view built
    from ``typed_headers`` on first use. Set ``typed_headers`` before
    publishing to send exactly those wire types (pika's encoder would turn
    every ``int`` into ``I``/``l``).
    """

    def __init__(
        self, *args: Any, typed_headers: tuple[tuple[str, HeaderValue], ...] | None = None, raw_headers: bytes | None = None, **kwargs: Any
    ) -> None:
        if args or kwargs:
            super().__init__(*args, **kwargs)
        else:  # how pika builds every incoming instance: skip its fourteen setattr calls
            self.__dict__.update(_NO_ARGUMENTS)
        self.typed_headers = typed_headers
        #: An already encoded field table (length prefix included) to send as is: tests use it for every wire type.
        self.raw_headers = raw_headers

    @property  # type: ignore[override]
    def headers(self) -> dict[str, Any] | None:
        plain = self.__dict__.get("_plain_headers", _UNSET)
        if plain is _UNSET:
            typed = self.__dict__.get("typed_headers")
            plain = None if typed is None else plain_table(typed)
            self.__dict__["_plain_headers"] = plain
        return plain

    @headers.setter
    def headers(self, value: dict[str, Any] | None) -> None:
        self.__dict__["_plain_headers"] = value

    def decode(self, encoded: bytes, offset: int = 0) -> TypedBasicProperties:
        """Decode a content header's property list in one pass (pika's values; the table typed, see above).

        Short strings are ``str`` when UTF-8 and ``bytes`` otherwise, as pika gives them. This runs once per
        delivered message, so it touches only the properties present.
        """
        (flags,) = _U16.unpack_from(encoded, offset)
        if flags & 1:  # a continuation flag word: never sent for basic (14 properties fit in one)
            super().decode(encoded, offset)
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
        values["_plain_headers"] = None if typed is None else _UNSET
        return self

    def encode(self) -> list[bytes]:
        raw = getattr(self, "raw_headers", None)
        if raw is None and self.typed_headers is None:
            return super().encode()
        marker = object.__new__(spec.BasicProperties)
        marker.__dict__.update({k: v for k, v in self.__dict__.items() if k not in _OWN_ATTRIBUTES})
        marker.headers = {"__rbak__": 0}  # placeholder: one S-free int field, replaced below
        pieces = spec.BasicProperties.encode(marker)
        placeholder = b"".join(pieces)
        encoded_placeholder = _placeholder_table()
        index = placeholder.index(encoded_placeholder)
        table = raw if raw is not None else encode_table(self.typed_headers or ())
        return [placeholder[:index] + table + placeholder[index + len(encoded_placeholder) :]]


_UNSET: Any = object()
_OWN_ATTRIBUTES = frozenset({"typed_headers", "raw_headers", "_plain_headers"})


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


def _placeholder_table() -> bytes:
    key = b"__rbak__"
    body = bytes([len(key)]) + key + struct.pack(">ci", b"I", 0)
    return struct.pack(">I", len(body)) + body


def install() -> None:
    """Make pika build :class:`TypedBasicProperties` for every incoming basic content header.

    Idempotent. The subclass behaves exactly like pika's class for other code
    in the process; it only adds the ``typed_headers`` attribute.
    """
    spec.props[spec.BasicProperties.INDEX] = TypedBasicProperties


def property_text(value: Any) -> str | None:
    """A short-string property as text (pika gives ``bytes`` when it is not UTF-8; the spec stores text)."""
    if value is None or isinstance(value, str):
        return value
    return bytes(value).decode("utf-8", "replace")


def properties_to_backup(props: spec.BasicProperties) -> BackupProperties:
    """The spec's BackupProperties from pika's properties (``type`` becomes ``type_field``)."""
    return BackupProperties(
        content_type=property_text(props.content_type),
        content_encoding=property_text(props.content_encoding),
        delivery_mode=props.delivery_mode,
        priority=props.priority,
        correlation_id=property_text(props.correlation_id),
        reply_to=property_text(props.reply_to),
        expiration=property_text(props.expiration),
        message_id=property_text(props.message_id),
        timestamp=props.timestamp,
        type_field=property_text(props.type),
        user_id=property_text(props.user_id),
        app_id=property_text(props.app_id),
        cluster_id=property_text(props.cluster_id),
    )


def headers_of(props: spec.BasicProperties) -> tuple[tuple[str, HeaderValue], ...]:
    """The typed header table of delivered properties (empty when the message has none)."""
    typed = getattr(props, "typed_headers", None)
    if typed is not None:
        return typed
    if props.headers:
        raise FieldTableError("properties were decoded without amqp_types.install(); header types would be lost")
    return ()


def record_from_delivery(
    method: spec.Basic.Deliver,
    props: spec.BasicProperties,
    body: bytes,
    *,
    queue: str,
    vhost: str,
    backed_up_at: int,
    drop_headers: frozenset[str] = frozenset(),
    delivery_tag: int | None = None,
) -> BackupRecord:
    """Build the BackupRecord of one delivery; ``drop_headers`` removes broker-owned headers."""
    headers = headers_of(props)
    if drop_headers and headers:
        headers = tuple(p for p in headers if p[0] not in drop_headers)
    return BackupRecord(
        body=bytes(body),
        properties=properties_to_backup(props),
        headers=headers,
        exchange=method.exchange,
        routing_key=method.routing_key,
        delivery_tag=method.delivery_tag if delivery_tag is None else delivery_tag,
        redelivered=bool(method.redelivered),
        backed_up_at=backed_up_at,
        source_queue=queue,
        source_vhost=vhost,
    )


def properties_from_record(record: BackupRecord) -> TypedBasicProperties:
    """Properties to republish a record with (restore, tests): typed headers, same wire types."""
    p = record.properties
    return TypedBasicProperties(
        content_type=p.content_type,
        content_encoding=p.content_encoding,
        delivery_mode=p.delivery_mode,
        priority=p.priority,
        correlation_id=p.correlation_id,
        reply_to=p.reply_to,
        expiration=p.expiration,
        message_id=p.message_id,
        timestamp=p.timestamp,
        type=p.type_field,
        user_id=p.user_id,
        app_id=p.app_id,
        cluster_id=p.cluster_id,
        typed_headers=record.headers if record.headers else None,
    )
