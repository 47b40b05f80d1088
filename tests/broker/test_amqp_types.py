"""AMQP field tables and properties <-> records, without a broker: every wire type survives."""

from __future__ import annotations

import math
import struct

import pytest
from pika import spec

from airflow_rbak.broker import amqp_types
from airflow_rbak.broker.amqp_types import FieldTableError, TypedBasicProperties, decode_table, encode_table
from airflow_rbak.codec.headers import HeaderValue as H
from airflow_rbak.codec.records import BackupProperties, BackupRecord, decode_record, encode_record
from tests.broker.record_reference import properties_from_record, properties_to_backup, record_from_delivery


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

    assert pairs["dec"] == amqp_types.decimal_value(3, -12345)
    assert pairs["binstr"].value == ((amqp_types.TYPE_TAG, H.short_string("longstr")), ("value", H.bytes_(b"\xff\x00")))


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


def test_hostile_nesting_is_refused():
    raw = b"V"
    for _ in range(80):
        raw = b"A" + struct.pack(">I", len(raw)) + raw
    with pytest.raises(FieldTableError, match="nested too deep"):
        decode_table(table(field(b"deep", raw[:1], raw[1:])))


EVERY_PROPERTY = BackupProperties(
    content_type="application/json", content_encoding="gzip", delivery_mode=2, priority=9, correlation_id="c",
    reply_to="r", expiration="60000", message_id="m", timestamp=1_712_756_400, type_field="t", user_id="guest",
    app_id="a", cluster_id="cl",
)
EVERY_HEADER = (
    ("long", H.long(-(2**63))), ("short", H.short(-5)), ("text", H.long_string("ü")), ("ok", H.bool_(False)),
    ("f64", H.double(1 / 3)), ("f32", H.float32(0.1)), ("blob", H.bytes_(b"\x00\xff")), ("when", H.timestamp(2**64 - 1)),
    ("none", H.void()), ("nested", H.table([("list", H.array([H.long(1), H.void(), H.table([])]))])),
    ("price", amqp_types.decimal_value(2, 1999)),
)


def wire_round_trip(props: spec.BasicProperties) -> TypedBasicProperties:
    """Encode properties as pika would send them and decode them as our connections receive them."""
    return TypedBasicProperties().decode(b"".join(props.encode()))


def test_a_record_republished_and_recaptured_is_the_same_record():
    record = BackupRecord(body=b"\x00hello", properties=EVERY_PROPERTY, headers=EVERY_HEADER, exchange="ex",
                          routing_key="rk", delivery_tag=7, backed_up_at=1, source_queue="q", source_vhost="v")

    delivered = wire_round_trip(properties_from_record(record))
    method = spec.Basic.Deliver(consumer_tag="c", delivery_tag=7, redelivered=False, exchange="ex", routing_key="rk")
    again = record_from_delivery(method, delivered, b"\x00hello", queue="q", vhost="v", backed_up_at=1)

    assert again == record
    assert decode_record(encode_record(again)) == record


def test_properties_without_headers_and_pika_defaults_round_trip():
    delivered = wire_round_trip(TypedBasicProperties(content_type="text/plain", delivery_mode=1))

    assert properties_to_backup(delivered) == BackupProperties(content_type="text/plain", delivery_mode=1)
    assert amqp_types.headers_of(delivered) == ()


def test_raw_headers_are_sent_byte_for_byte():
    raw = table(*CANONICAL_FIELDS)

    delivered = wire_round_trip(TypedBasicProperties(message_id="m", raw_headers=raw))

    assert encode_table(delivered.typed_headers) == raw and delivered.message_id == "m"


def test_broker_owned_headers_can_be_dropped():
    props = wire_round_trip(TypedBasicProperties(typed_headers=(("x-delivery-count", H.long(2)), ("mine", H.long(1)))))
    method = spec.Basic.Deliver(delivery_tag=1, exchange="", routing_key="q")

    record = record_from_delivery(method, props, b"", queue="q", vhost="/", backed_up_at=0,
                                             drop_headers=frozenset({"x-delivery-count"}), delivery_tag=40)

    assert record.headers == (("mine", H.long(1)),) and record.delivery_tag == 40


def test_headers_decoded_by_plain_pika_are_refused_rather_than_lossy():
    plain = spec.BasicProperties(headers={"n": 1})

    with pytest.raises(FieldTableError, match="plain pika connection"):
        amqp_types.headers_of(plain)


def test_plain_headers_view_matches_pika_and_survives_timestamps_past_year_9999():
    # pika's own decoder raises OverflowError on such a timestamp; one message like it must not stop a capture
    raw = table(field(b"far", b"T", struct.pack(">Q", 2**63 + 5)), field(b"when", b"T", struct.pack(">Q", 0)),
                CANONICAL_FIELDS[5], field(b"n", b"I", struct.pack(">i", 3)), CANONICAL_FIELDS[7], CANONICAL_FIELDS[11])

    delivered = wire_round_trip(TypedBasicProperties(raw_headers=raw, delivery_mode=2))

    from datetime import datetime, timezone
    from decimal import Decimal

    assert delivered.headers == {"far": 2**63 + 5, "when": datetime(1970, 1, 1, tzinfo=timezone.utc),
                                 "dec": Decimal("-12.345"), "n": 3, "binstr": b"\xff\x00", "tbl": {"inner": {"k": 7}}}
    assert delivered.delivery_mode == 2
