"""AMQP basic properties <-> records, without a broker: every property and header type survives."""

from __future__ import annotations

import struct

import pytest
from pika import spec

from airflow_rbak.broker import amqp_types
from airflow_rbak.broker.amqp_types import TypedBasicProperties
from airflow_rbak.codec.field_table import FieldTableError, decimal_value, encode_table
from airflow_rbak.codec.headers import HeaderValue as H
from airflow_rbak.codec.property_list import FLAGS
from airflow_rbak.codec.records import BackupProperties, BackupRecord, decode_record, encode_record
from tests.broker.record_reference import properties_from_record, properties_to_backup, record_from_delivery
from tests.codec.test_field_table import CANONICAL_FIELDS, field, table

EVERY_PROPERTY = BackupProperties(
    content_type="application/json", content_encoding="gzip", delivery_mode=2, priority=9, correlation_id="c",
    reply_to="r", expiration="60000", message_id="m", timestamp=1_712_756_400, type_field="t", user_id="guest",
    app_id="a", cluster_id="cl",
)
EVERY_HEADER = (
    ("long", H.long(-(2**63))), ("short", H.short(-5)), ("text", H.long_string("ü")), ("ok", H.bool_(False)),
    ("f64", H.double(1 / 3)), ("f32", H.float32(0.1)), ("blob", H.bytes_(b"\x00\xff")), ("when", H.timestamp(2**64 - 1)),
    ("none", H.void()), ("nested", H.table([("list", H.array([H.long(1), H.void(), H.table([])]))])),
    ("price", decimal_value(2, 1999)),
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


def test_the_wire_decoder_gives_pikas_values_for_every_property():
    props = spec.BasicProperties(content_type="text/plain", content_encoding="gzip", delivery_mode=2, priority=9,
                                 correlation_id="c", reply_to="r", expiration="6", message_id=b"\xffm", timestamp=2**64 - 1,
                                 type="t", user_id="u", app_id="a", cluster_id="cl")
    encoded = b"".join(props.encode())

    ours, pikas = TypedBasicProperties().decode(encoded), spec.BasicProperties().decode(encoded)

    names = [n for n in vars(pikas) if n != "headers"]
    assert [getattr(ours, n) for n in names] == [getattr(pikas, n) for n in names]
    assert ours.headers is None and ours.typed_headers is None
    assert vars(TypedBasicProperties().decode(b"\x00\x00")) == {**dict.fromkeys(names), "_plain_headers": None,
                                                               "typed_headers": None, "raw_headers": None}


def test_the_codecs_presence_flags_are_pikas():
    assert FLAGS == {name: getattr(spec.BasicProperties, f"FLAG_{name.upper()}") for name in FLAGS}
    assert set(FLAGS) == {n for n in vars(spec.BasicProperties()) if not n.startswith("_")}
