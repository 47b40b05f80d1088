"""AMQP 0-9-1 field tables (message headers) <-> typed header values, without a broker: every wire type survives."""

from __future__ import annotations

import math
import struct

import pytest

from airflow_rbak.codec import field_table
from airflow_rbak.codec.field_table import FieldTableError, decode_table, encode_table
from airflow_rbak.codec.headers import MAX_DEPTH
from airflow_rbak.codec.headers import HeaderValue as H
from airflow_rbak.codec.records import decode_record, encode_record_object, record_object


def field(key: bytes, tag: bytes, payload: bytes = b"") -> bytes:
    return bytes([len(key)]) + key + tag + payload


def array(*values: bytes) -> bytes:
    body = b"".join(values)
    return struct.pack(">I", len(body)) + body


def table(*fields: bytes) -> bytes:
    body = b"".join(fields)
    return struct.pack(">I", len(body)) + body


#: One field of each AMQP 0-9-1 type whose tag the encoder writes back unchanged.
CANONICAL_FIELDS = [
    field(b"bool", b"t", b"\x01"),
    field(b"short", b"s", struct.pack(">h", -300)),
    field(b"long", b"l", struct.pack(">q", -(2**62))),
    field(b"f32", b"f", struct.pack(">f", 0.1)),
    field(b"f64", b"d", struct.pack(">d", 2.5e-300)),
    field(b"dec", b"D", struct.pack(">Bi", 3, -12345)),
    field(b"text", b"S", struct.pack(">I", 3) + "€".encode()),
    field(b"binstr", b"S", struct.pack(">I", 2) + b"\xff\x00"),
    field(b"bytes", b"x", struct.pack(">I", 3) + b"\x00\x01\xff"),
    field(b"ts", b"T", struct.pack(">Q", 2**63 + 5)),
    field(b"void", b"V"),
    field(b"tbl", b"F", table(field(b"inner", b"F", table(field(b"k", b"l", struct.pack(">q", 7)))))),
    field(b"arr", b"A", array(b"t\x00", b"V", b"A" + array(b"l" + struct.pack(">q", 1)))),
]


def test_canonical_wire_types_decode_and_encode_to_identical_bytes():
    raw = table(*CANONICAL_FIELDS)

    pairs, end = decode_table(raw)

    assert end == len(raw)
    assert encode_table(pairs) == raw


@pytest.mark.parametrize(
    ("tag", "payload", "kind", "value"),
    [
        (b"b", struct.pack(">b", -5), "Short", -5),
        (b"B", b"\xfa", "Short", 250),  # unsigned 8-bit
        (b"U", struct.pack(">h", -2), "Short", -2),
        (b"u", struct.pack(">H", 65000), "Long", 65000),  # unsigned 16-bit
        (b"I", struct.pack(">i", -70000), "Long", -70000),
        (b"i", struct.pack(">I", 4_000_000_000), "Long", 4_000_000_000),  # unsigned 32-bit
        (b"L", struct.pack(">q", -(2**63)), "Long", -(2**63)),
    ],
)
def test_every_integer_width_keeps_its_exact_value(tag, payload, kind, value):
    ((_, decoded),), _ = decode_table(table(field(b"n", tag, payload)))

    assert (decoded.kind, decoded.value) == (kind, value)
    # re-encoded as RabbitMQ writes integers: Short as 's', Long as 'l'
    assert decode_table(encode_table([("n", decoded)]))[0] == (("n", decoded),)


def test_decimal_and_binary_long_strings_use_tagged_tables():
    pairs = dict(decode_table(table(CANONICAL_FIELDS[5], CANONICAL_FIELDS[7]))[0])

    assert pairs["dec"] == field_table.decimal_value(3, -12345)
    assert pairs["binstr"].value == ((field_table.TYPE_TAG, H.short_string("longstr")), ("value", H.bytes_(b"\xff\x00")))


def test_floats_are_bit_exact_including_nan_and_infinities():
    raw = table(field(b"a", b"f", struct.pack(">f", 1.1)), field(b"b", b"d", struct.pack(">d", -math.inf)),
                field(b"c", b"d", struct.pack(">d", 5e-324)))

    pairs = dict(decode_table(raw)[0])

    assert struct.pack(">f", pairs["a"].value) == struct.pack(">f", 1.1)
    assert pairs["b"].value == -math.inf and pairs["c"].value == 5e-324
    assert encode_table(list(pairs.items())) == raw


def test_tables_keep_order_and_duplicate_keys():
    raw = table(field(b"k", b"l", struct.pack(">q", 1)), field(b"a", b"t", b"\x00"), field(b"k", b"l", struct.pack(">q", 2)))

    pairs, _ = decode_table(raw)

    assert [k for k, _ in pairs] == ["k", "a", "k"]
    assert encode_table(pairs) == raw


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        (table(field(b"x", b"Z")), "unknown header field type"),
        (table(field(b"x", b"S", struct.pack(">I", 99) + b"ab")), "runs past the table"),
        (struct.pack(">I", 3) + field(b"b", b"t", b"\x01"), "does not match"),
        (struct.pack(">I", 50) + field(b"b", b"t", b"\x01"), "runs past the end"),
        (table(field(b"n", b"l", b"\x00\x01")), "runs past the end|truncated"),
    ],
)
def test_malformed_tables_are_refused(raw, message):
    with pytest.raises(FieldTableError, match=message):
        decode_table(raw)


def nested(kind: bytes, levels: int) -> bytes:
    """A header table whose one value is ``levels`` tables or arrays deep, a Long at the bottom."""
    value = b"l" + struct.pack(">q", 1)
    for _ in range(levels):
        value = kind + (array(value) if kind == b"A" else table(field(b"k", value[:1], value[1:])))
    return table(field(b"deep", value[:1], value[1:]))


@pytest.mark.parametrize("kind", [b"A", b"F"])
def test_hostile_nesting_is_refused(kind):
    with pytest.raises(FieldTableError, match="nested too deep"):
        decode_table(nested(kind, 10_000))


@pytest.mark.parametrize("kind", [b"A", b"F"])
def test_the_deepest_table_accepted_is_one_a_record_holds(kind):
    # Given the deepest nesting the decoder takes, and one level more
    deepest, _ = decode_table(nested(kind, MAX_DEPTH - 1))
    with pytest.raises(FieldTableError, match="nested too deep"):
        decode_table(nested(kind, MAX_DEPTH))

    # When the accepted one is a record's headers, Then the record reads back
    headers = [[key, value.to_json()] for key, value in deepest]
    raw = encode_record_object(record_object(b"", {}, headers, "", "", 0, False, 0, "q", "/"))
    assert decode_record(raw).headers == deepest
