"""A staged delivery becomes, at encode, exactly the record JSON the capture used to write on receipt."""

from __future__ import annotations

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pika import spec

from airflow_rbak.broker.amqp_types import DeliveredProperties, TypedBasicProperties
from airflow_rbak.capture.delivery_json import delivery_record_json
from airflow_rbak.capture.message_identity import QUORUM_BROKER_HEADERS, STREAM_BROKER_HEADERS
from airflow_rbak.capture.staged_delivery import (
    DROPPED_HEADERS,
    StagedRecordError,
    read_staged,
    stage_delivery,
)
from airflow_rbak.codec.headers import HeaderValue
from airflow_rbak.codec.records import BackupRecord
from airflow_rbak.exceptions import RbakError
from tests.broker.record_reference import properties_from_record
from tests.broker.test_amqp_types import EVERY_HEADER, EVERY_PROPERTY
from tests.codec.strategies import small_body_records

STAMP = 1_712_756_400_123


def received(props: spec.BasicProperties) -> DeliveredProperties:
    """Properties as our connections hand them to a consumer: the property list as it came over the wire."""
    return DeliveredProperties(b"".join(props.encode()))


def on_receipt(method: spec.Basic.Deliver, props: spec.BasicProperties, body: bytes, dropped: int, tag: int | None) -> bytes:
    """What the capture wrote before staging deliveries: the record JSON, built on receipt."""
    typed = TypedBasicProperties().decode(b"".join(props.encode()))
    return delivery_record_json(method, typed, body, queue="q", vhost="v", backed_up_at=STAMP,
                                drop_headers=DROPPED_HEADERS[dropped], delivery_tag=tag)


@settings(max_examples=100, deadline=None)
@given(small_body_records(max_size=4), st.booleans(), st.sampled_from(range(len(DROPPED_HEADERS))))
def test_generated_deliveries_encode_to_the_json_written_on_receipt(records, redelivered, dropped):
    for n, record in enumerate(records):
        # Given a delivery as the broker sends it, with the broker headers a quorum queue and a stream add
        if record.properties.timestamp is not None and record.properties.timestamp < 0:
            continue  # the wire's timestamp is unsigned: no broker delivers this one
        props = properties_from_record(record)
        props.typed_headers = (*(props.typed_headers or ()), ("x-delivery-count", HeaderValue.long(n)),
                               ("x-stream-offset", HeaderValue.long(n + 100)))
        method = spec.Basic.Deliver(consumer_tag="rbak-00001", delivery_tag=n + 1, redelivered=redelivered,
                                    exchange=record.exchange, routing_key=record.routing_key)
        tag = n + 100 if dropped == 2 else None

        # When it is staged as received and made into its record at encode
        staged = stage_delivery(method, received(props), record.body, STAMP, dropped, delivery_tag=tag)

        # Then the record's bytes are those written on receipt, and its time is read without building it
        assert read_staged(staged, "q", "v") == (on_receipt(method, props, record.body, dropped, tag), STAMP)


def test_every_property_and_header_an_empty_body_and_non_utf8_short_strings():
    props = properties_from_record(BackupRecord(body=b"", properties=EVERY_PROPERTY, headers=EVERY_HEADER))
    props.message_id = b"\xff\xfeid"  # pika gives bytes for a short string that is not UTF-8
    props_bytes = b"".join(props.encode())
    method = spec.Basic.Deliver(consumer_tag="c", delivery_tag=3, redelivered=True, exchange="ex", routing_key="rk")

    staged = stage_delivery(method, DeliveredProperties(props_bytes), b"", STAMP, 1)

    expected = delivery_record_json(method, TypedBasicProperties().decode(props_bytes), b"", queue="q", vhost="v",
                                    backed_up_at=STAMP, drop_headers=QUORUM_BROKER_HEADERS)
    assert read_staged(staged, "q", "v") == (expected, STAMP)
    assert b'"body":null' in expected and '"message_id":"\ufffd\ufffdid"'.encode() in expected


def test_the_dropped_header_codes_are_the_capture_identities_sets():
    assert DROPPED_HEADERS == (frozenset(), QUORUM_BROKER_HEADERS, STREAM_BROKER_HEADERS)


def test_a_record_staged_as_json_by_an_earlier_version_is_read_as_it_is():
    record = orjson.dumps({"body": None, "properties": {}, "headers": [], "exchange": "", "routing_key": "q",
                           "delivery_tag": 1, "redelivered": False, "backed_up_at": 42, "source_queue": "q",
                           "source_vhost": "/"})

    assert read_staged(record, "other", "names") == (record, 42)


@pytest.mark.parametrize("staged, says", [
    (b"\x01\x00", "shorter than its header"),
    (b"\x07" + bytes(18), "format 7"),
    (b"\x01\x05" + bytes(17), "header code 5"),
    (b"\x01\x00\x00" + bytes(16) + b"\x09ex", "runs past its end"),
    (b"\x01\x00\x00" + bytes(16) + b"\x00\x00\xff\x00\x00\x00\x00", "runs past its end"),
    (b"\x01\x00\x00" + bytes(16) + b"\x00\x00\x02\x00\x00\x00\x80\x00", "truncated"),
    (b"\x01\x00\x00" + bytes(16) + b"\x00\x00\x06\x00\x00\x00\x20\x00\x00\x00\x00\x80", "header table"),
])
def test_a_damaged_staged_record_is_a_clear_error(staged, says):
    with pytest.raises(RbakError, match=says):
        read_staged(staged, "q", "v")


def test_the_staged_record_error_is_a_value_error_of_the_package():
    assert issubclass(StagedRecordError, RbakError) and issubclass(StagedRecordError, ValueError)


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
