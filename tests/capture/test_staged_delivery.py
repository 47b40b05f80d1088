"""A delivery the capture stages reads back, without pika, as exactly the record JSON encode made of it on pika."""

from __future__ import annotations

import decimal
import struct
from datetime import datetime, timezone

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pika import spec

from airflow_rbak.broker.amqp_types import DeliveredProperties, TypedBasicProperties
from airflow_rbak.capture.staged_delivery import stage_delivery
from airflow_rbak.codec.headers import HeaderValue
from airflow_rbak.codec.records import BackupRecord, encode_record
from airflow_rbak.codec.staged_records import DROPPED_HEADERS, StagedRecordError, read_staged
from airflow_rbak.exceptions import RbakError
from tests.broker.record_reference import properties_from_record, record_from_delivery
from tests.broker.test_amqp_types import EVERY_HEADER, EVERY_PROPERTY
from tests.capture.pika_staged_reader import pika_read_staged
from tests.codec.strategies import short_strings, small_body_records, text, wire_tables

STAMP = 1_712_756_400_123
BROKER_HEADERS = b"".join((b"\x10x-delivery-count", b"l", struct.pack(">q", 3), b"\x0fx-stream-offset", b"l", struct.pack(">q", 9)))


def received(props: spec.BasicProperties) -> DeliveredProperties:
    """Properties as our connections hand them to a consumer: the property list as it came over the wire."""
    return DeliveredProperties(b"".join(props.encode()))


def both_readers(staged: bytes) -> tuple[tuple[bytes, int], tuple[bytes, int]]:
    return read_staged(staged, "q", "v"), pika_read_staged(staged, "q", "v")


u8 = st.integers(0, 255)
optional_short = st.one_of(st.none(), text.filter(lambda t: len(t.encode()) <= 255), short_strings)
#: Every basic property, each absent or any value its wire type holds (short strings that are not UTF-8 as bytes,
#: as pika gives them), and a header table of any field types.
pika_properties = st.builds(
    TypedBasicProperties,
    content_type=optional_short, content_encoding=optional_short, delivery_mode=st.none() | u8,
    priority=st.none() | u8, correlation_id=optional_short, reply_to=optional_short, expiration=optional_short,
    message_id=optional_short, timestamp=st.none() | st.integers(0, 2**64 - 1), type=optional_short,
    user_id=optional_short, app_id=optional_short, cluster_id=optional_short,
    raw_headers=st.none() | wire_tables | wire_tables.map(lambda t: struct.pack(">I", len(t) - 4 + len(BROKER_HEADERS))
                                                           + BROKER_HEADERS + t[4:]),
)
names = text.filter(lambda t: len(t.encode()) <= 255)
deliveries = st.builds(
    spec.Basic.Deliver, consumer_tag=st.just("rbak-00001"), delivery_tag=st.integers(0, 2**64 - 1),
    redelivered=st.booleans(), exchange=names, routing_key=names,
)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(deliveries, pika_properties, st.binary(max_size=300), st.integers(0, 2**63 - 1), st.sampled_from(range(len(DROPPED_HEADERS))),
       st.none() | st.integers(0, 2**64 - 1))
def test_any_delivery_reads_back_as_the_pika_reader_read_it(method, props, body, stamp, dropped, tag):
    # Given any delivery, as our connections receive it, staged by the capture (a stream's with its offset as tag)
    staged = stage_delivery(method, received(props), body, stamp, dropped, delivery_tag=tag)

    # When the codec reads it, Then its record JSON is the pika reader's, byte for byte
    new, old = both_readers(staged)
    assert new == old and new[1] == stamp


#: What pika's own encoder writes a header table from (it refuses floats).
plain_values = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(-(2**63), 2**63 - 1), text, st.binary(max_size=20),
              st.decimals(allow_nan=False, allow_infinity=False, places=3).filter(lambda d: abs(d) < 2**31 / 1000),
              st.datetimes(min_value=datetime(1970, 1, 1), timezones=st.just(timezone.utc)).map(lambda d: d.replace(microsecond=0))),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=10), inner, max_size=3),
    max_leaves=10,
)


@settings(max_examples=150, deadline=None)
@given(st.dictionaries(st.text(max_size=20), plain_values, max_size=6), u8, st.binary(max_size=100))
def test_headers_pikas_own_encoder_wrote_read_back_as_the_pika_reader_read_them(headers, mode, body):
    # Given a message a pika publisher sent, its header table encoded by pika from plain Python values
    props = spec.BasicProperties(headers=headers, delivery_mode=mode, message_id="m")
    method = spec.Basic.Deliver(delivery_tag=1, redelivered=False, exchange="ex", routing_key="rk")

    staged = stage_delivery(method, received(props), body, STAMP, 1)

    new, old = both_readers(staged)
    assert new == old


@settings(max_examples=100, deadline=None)
@given(small_body_records(max_size=4), st.booleans(), st.sampled_from(range(len(DROPPED_HEADERS))))
def test_generated_deliveries_read_back_as_the_typed_reference_record(records, redelivered, dropped):
    for n, record in enumerate(records):
        # Given a message as the broker delivers it, with the broker headers a quorum queue and a stream add
        if record.properties.timestamp is not None and record.properties.timestamp < 0:
            continue  # the wire's timestamp is unsigned: no broker delivers this one
        props = properties_from_record(record)
        props.typed_headers = (*(props.typed_headers or ()), ("x-delivery-count", HeaderValue.long(n)),
                               ("x-stream-offset", HeaderValue.long(n + 100)))
        method = spec.Basic.Deliver(consumer_tag="rbak-00001", delivery_tag=n + 1, redelivered=redelivered,
                                    exchange=record.exchange, routing_key=record.routing_key)
        tag = n + 100 if dropped == 2 else None

        # When it is staged as received and read at encode
        staged = stage_delivery(method, received(props), record.body, STAMP, dropped, delivery_tag=tag)

        # Then the record is the one the typed model (BackupRecord, encode_record) writes of the delivery
        reference = record_from_delivery(method, TypedBasicProperties().decode(b"".join(props.encode())), record.body,
                                         queue="q", vhost="v", backed_up_at=STAMP, drop_headers=DROPPED_HEADERS[dropped],
                                         delivery_tag=tag)
        assert read_staged(staged, "q", "v") == (encode_record(reference), STAMP)


def test_every_property_and_header_an_empty_body_and_non_utf8_short_strings():
    props = properties_from_record(BackupRecord(body=b"", properties=EVERY_PROPERTY, headers=EVERY_HEADER))
    props.message_id = b"\xff\xfeid"  # pika gives bytes for a short string that is not UTF-8
    method = spec.Basic.Deliver(consumer_tag="c", delivery_tag=3, redelivered=True, exchange="ex", routing_key="rk")

    staged = stage_delivery(method, received(props), b"", STAMP, 1)

    new, old = both_readers(staged)
    assert new == old
    assert b'"body":null' in new[0] and '"message_id":"\ufffd\ufffdid"'.encode() in new[0]


@pytest.mark.parametrize("field", ["exchange", "routing_key"])
def test_an_exchange_or_routing_key_that_is_not_utf8_is_refused_as_before(field):
    method = spec.Basic.Deliver(delivery_tag=1, redelivered=False, exchange="ex", routing_key="rk")
    setattr(method, field, b"\xffname")  # pika gives bytes for a short string that is not UTF-8

    staged = stage_delivery(method, received(spec.BasicProperties()), b"x", STAMP, 0)

    with pytest.raises(StagedRecordError, match="not UTF-8"):
        read_staged(staged, "q", "v")
    with pytest.raises(RbakError):  # the pika reader could not write the record's JSON either
        pika_read_staged(staged, "q", "v")


def damaged(method: spec.Basic.Deliver, props: spec.BasicProperties, data: st.DataObject) -> bytes:
    """A staged delivery whose property list has some bytes changed or is cut short, and which may itself be cut."""
    wire = bytearray(b"".join(props.encode()))
    for _ in range(data.draw(st.integers(0 if len(wire) > 2 else 0, 4 if len(wire) > 2 else 0))):
        wire[data.draw(st.integers(0, len(wire) - 1))] = data.draw(u8)
    if data.draw(st.booleans()):
        wire = wire[: data.draw(st.integers(0, len(wire)))]
    staged = stage_delivery(method, DeliveredProperties(bytes(wire)), b"body", STAMP, 0)
    return staged[: data.draw(st.integers(0, len(staged)))] if data.draw(st.booleans()) else staged


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(deliveries, pika_properties, st.data())
def test_a_damaged_staged_record_is_a_staged_record_error_or_the_same_json_as_before(method, props, data):
    # Given a staged delivery, damaged
    staged = damaged(method, props, data)

    # When both readers read it
    refusal = ""
    try:
        new = read_staged(staged, "q", "v")
    except StagedRecordError as exc:  # the only error the codec's reader raises
        new, refusal = None, str(exc)
    try:
        old = pika_read_staged(staged, "q", "v")
    except Exception:  # noqa: BLE001 - the pika reader raised whatever struct, pika or the table decoder raised
        old = None

    # Then whatever both read is the same record, and the codec refuses only what pika read cut short
    if new is not None and old is not None:
        assert new == old
    elif old is not None:
        assert "runs past the property list" in refusal


def test_a_short_string_past_the_end_of_its_property_list_is_refused_where_pika_cut_it_short():
    # Given a property list whose content type (its last property) claims 5 bytes and has 2
    method = spec.Basic.Deliver(delivery_tag=1, redelivered=False, exchange="", routing_key="q")
    staged = stage_delivery(method, DeliveredProperties(b"\x80\x00\x05ab"), b"", STAMP, 0)

    # When read, Then it is refused (pika read "ab")
    with pytest.raises(StagedRecordError, match="runs past the property list"):
        read_staged(staged, "q", "v")
    assert b'"content_type":"ab"' in pika_read_staged(staged, "q", "v")[0]


def test_continuation_flag_words_are_read_past_and_the_headers_typed():
    # Given a property list with a second flag word (basic needs one; RabbitMQ never sends another)
    props = b"".join(spec.BasicProperties(message_id="m", headers={"n": 1}).encode())
    flags = struct.unpack_from(">H", props)[0] | 1
    method = spec.Basic.Deliver(delivery_tag=1, redelivered=False, exchange="", routing_key="q")
    staged = stage_delivery(method, DeliveredProperties(struct.pack(">HH", flags, 0) + props[2:]), b"", STAMP, 0)

    # When read, Then the properties after the flag words are the record's, its header typed (pika's reader lost them)
    assert b'"message_id":"m"' in read_staged(staged, "q", "v")[0] and b'[["n",{"Long":1}]]' in read_staged(staged, "q", "v")[0]
    with pytest.raises(RbakError, match="types would be lost"):
        pika_read_staged(staged, "q", "v")


def test_delivered_properties_decode_on_first_read_exactly_as_on_receipt():
    props = spec.BasicProperties(content_type="text/plain", delivery_mode=2, priority=9, message_id="m",
                                 timestamp=2**64 - 1, headers={"source": "bench", "n": 5})
    wire = b"".join(props.encode())

    delivered = DeliveredProperties(wire)

    assert set(vars(delivered)) == {"raw"}  # nothing decoded on receipt
    assert delivered.priority == 9  # any read decodes the whole list
    eager = TypedBasicProperties().decode(wire)
    assert {k: v for k, v in vars(delivered).items() if k != "raw"} == {k: v for k, v in vars(eager).items()
                                                                         if k != "raw_headers"}
    assert (delivered.headers, delivered.timestamp) == ({"source": "bench", "n": 5}, 2**64 - 1)


def test_headers_are_the_first_read():
    delivered = DeliveredProperties(b"".join(spec.BasicProperties(headers={"a": "b"}).encode()))

    assert delivered.headers == {"a": "b"}
    assert delivered.typed_headers == (("a", HeaderValue.long_string("b")),)
    assert getattr(delivered, "no_such_property", "absent") == "absent"


def test_a_malformed_property_list_is_an_error_when_read_not_on_receipt():
    delivered = DeliveredProperties(b"\x20\x00\x00\x00\x00\x80")  # headers announced, a table far too long

    with pytest.raises(RbakError, match="header table"):
        _ = delivered.headers


def test_pika_gives_datetimes_and_decimals_which_the_record_keeps_typed():
    props = spec.BasicProperties(headers={"at": datetime(2024, 4, 10, tzinfo=timezone.utc), "price": decimal.Decimal("19.99")})
    method = spec.Basic.Deliver(delivery_tag=1, redelivered=False, exchange="", routing_key="q")

    record, _ = read_staged(stage_delivery(method, received(props), b"", STAMP, 0), "q", "v")

    assert b'["at",{"Timestamp":1712707200}]' in record
    assert b'["price",{"Table":[["rbak:type",{"ShortString":"decimal"}],["scale",{"Short":2}],["value",{"Long":1999}]]}]' in record
