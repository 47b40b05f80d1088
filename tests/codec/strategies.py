"""Hypothesis strategies for arbitrary records: every header variant, nested, unicode everywhere."""

from __future__ import annotations

import random
import struct

from hypothesis import strategies as st

from airflow_rbak.codec import BackupProperties, BackupRecord, HeaderValue

# JSON and the reference tool's Rust strings carry Unicode scalar values: no lone surrogates.
text = st.text(st.characters(exclude_categories=("Cs",)), max_size=40)
i64 = st.integers(-(2**63), 2**63 - 1)
u8 = st.integers(0, 255)

scalars = st.one_of(
    text.map(HeaderValue.long_string),
    text.map(HeaderValue.short_string),
    i64.map(HeaderValue.long),
    st.integers(-(2**15), 2**15 - 1).map(HeaderValue.short),
    st.booleans().map(HeaderValue.bool_),
    st.binary(max_size=64).map(HeaderValue.bytes_),
    st.integers(0, 2**64 - 1).map(HeaderValue.timestamp),
    st.floats(allow_nan=False, allow_infinity=False, width=32).map(HeaderValue.float32),
    st.floats(allow_nan=False, allow_infinity=False).map(HeaderValue.double),
    st.just(HeaderValue.void()),
)
header_values = st.recursive(
    scalars,
    lambda inner: st.one_of(
        st.lists(st.tuples(text, inner), max_size=4).map(HeaderValue.table),
        st.lists(inner, max_size=4).map(HeaderValue.array),
    ),
    max_leaves=12,
)
headers = st.lists(st.tuples(text, header_values), max_size=6).map(tuple)

one_mib_bodies = st.integers(0, 2**32).map(lambda seed: random.Random(seed).randbytes(1 << 20))
small_bodies = st.one_of(st.just(b""), st.binary(max_size=512), text.map(str.encode))
# One body in twenty is 1 MiB: enough of them per run, while the suite stays fast.
bodies = st.integers(0, 19).flatmap(lambda i: one_mib_bodies if i == 0 else small_bodies)


def optional(strategy):
    return st.one_of(st.none(), strategy)


properties = st.builds(
    BackupProperties,
    content_type=optional(text), content_encoding=optional(text), delivery_mode=optional(u8), priority=optional(u8),
    correlation_id=optional(text), reply_to=optional(text), expiration=optional(text), message_id=optional(text),
    timestamp=optional(i64), type_field=optional(text), user_id=optional(text), app_id=optional(text),
    cluster_id=optional(text),
)

records = st.builds(
    BackupRecord,
    body=bodies, properties=properties, headers=headers, exchange=text, routing_key=text,
    delivery_tag=st.integers(0, 2**64 - 1), redelivered=st.booleans(),
    backed_up_at=st.integers(0, 2**53), source_queue=text, source_vhost=text,
)


def small_body_records(max_size: int = 20):
    """Records whose bodies stay small, for tests that need many of them."""
    return st.lists(
        st.builds(BackupRecord, body=st.binary(max_size=200), properties=properties, headers=headers,
                  backed_up_at=st.integers(0, 2**53), source_queue=text, source_vhost=text),
        max_size=max_size,
    )


# AMQP 0-9-1 field tables on the wire, one strategy per field type the broker or pika may send (every integer width
# signed and unsigned, any float bit pattern, decimals, long strings that are not UTF-8, byte arrays, void), nested.
def _sized(payload: bytes) -> bytes:
    return struct.pack(">I", len(payload)) + payload


def _packed(tag: bytes, fmt: str, values: st.SearchStrategy) -> st.SearchStrategy:
    return values.map(lambda v: tag + struct.pack(fmt, v))


short_strings = st.one_of(text.map(str.encode), st.binary(max_size=40)).filter(lambda raw: len(raw) <= 255)
wire_scalars = st.one_of(
    _packed(b"t", ">B", u8),  # any byte: pika and RabbitMQ read all but 0 as true
    _packed(b"b", ">b", st.integers(-(2**7), 2**7 - 1)),
    _packed(b"B", ">B", u8),
    *(_packed(tag, ">h", st.integers(-(2**15), 2**15 - 1)) for tag in (b"s", b"U")),
    _packed(b"u", ">H", st.integers(0, 2**16 - 1)),
    _packed(b"I", ">i", st.integers(-(2**31), 2**31 - 1)),
    _packed(b"i", ">I", st.integers(0, 2**32 - 1)),
    *(_packed(tag, ">q", i64) for tag in (b"l", b"L")),
    st.binary(min_size=4, max_size=4).map(lambda bits: b"f" + bits),  # NaN payloads and infinities too
    st.binary(min_size=8, max_size=8).map(lambda bits: b"d" + bits),
    st.tuples(u8, st.integers(-(2**31), 2**31 - 1)).map(lambda d: b"D" + struct.pack(">Bi", *d)),
    short_strings.map(lambda raw: b"S" + _sized(raw)),
    st.binary(max_size=40).map(lambda raw: b"x" + _sized(raw)),
    _packed(b"T", ">Q", st.integers(0, 2**64 - 1)),
    st.just(b"V"),
)


def _field(key: bytes, value: bytes) -> bytes:
    return bytes([len(key)]) + key + value


wire_values = st.recursive(
    wire_scalars,
    lambda inner: st.one_of(
        st.lists(st.tuples(short_strings, inner), max_size=4).map(lambda pairs: b"F" + _sized(b"".join(_field(*p) for p in pairs))),
        st.lists(inner, max_size=4).map(lambda values: b"A" + _sized(b"".join(values))),
    ),
    max_leaves=16,
)
#: A header table as it comes over the wire, its u32 length first; keys may repeat, or not be UTF-8.
wire_tables = st.lists(st.tuples(short_strings, wire_values), max_size=8).map(lambda pairs: _sized(b"".join(_field(*p) for p in pairs)))
