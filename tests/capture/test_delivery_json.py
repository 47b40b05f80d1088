"""The capture's per-message path writes exactly the record the typed model writes, for any delivery."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st
from pika import spec

from airflow_rbak.broker.amqp_types import TypedBasicProperties
from airflow_rbak.capture.delivery_json import delivery_record_json
from airflow_rbak.codec.headers import HeaderValue
from airflow_rbak.codec.records import BackupRecord, encode_record
from tests.broker.record_reference import properties_from_record, record_from_delivery
from tests.broker.test_amqp_types import EVERY_HEADER, EVERY_PROPERTY, wire_round_trip
from tests.codec.strategies import small_body_records

DROP = frozenset({"x-delivery-count"})


def both_ways(method: spec.Basic.Deliver, props: TypedBasicProperties, body: bytes, tag: int | None = None) -> tuple[bytes, bytes]:
    """(fast path, typed path) for one delivery."""
    kwargs = {"queue": "q", "vhost": "v", "backed_up_at": 1_712_756_400_123, "drop_headers": DROP, "delivery_tag": tag}
    typed = encode_record(record_from_delivery(method, props, body, **kwargs))
    return delivery_record_json(method, props, body, **kwargs), typed


@settings(max_examples=100, deadline=None)
@given(small_body_records(max_size=4), st.booleans())
def test_generated_deliveries_give_the_typed_paths_bytes(records, redelivered):
    for n, record in enumerate(records):
        # Given a message as the broker delivers it (properties through the wire decoder), a broker header added
        if record.properties.timestamp is not None and record.properties.timestamp < 0:
            continue  # the wire's timestamp is unsigned: no broker delivers this one
        props = wire_round_trip(properties_from_record(record))
        props.typed_headers = (*(props.typed_headers or ()), ("x-delivery-count", HeaderValue.long(n)))
        method = spec.Basic.Deliver(consumer_tag="rbak-00001", delivery_tag=n + 1, redelivered=redelivered,
                                    exchange=record.exchange, routing_key=record.routing_key)

        # When it is written both ways, Then the bytes are identical
        fast, typed = both_ways(method, props, record.body, tag=record.delivery_tag if redelivered else None)
        assert fast == typed


def test_non_utf8_short_strings_every_property_and_header_and_an_empty_body():
    props = wire_round_trip(properties_from_record(
        BackupRecord(body=b"", properties=EVERY_PROPERTY, headers=EVERY_HEADER)))
    props.message_id, props.app_id = b"\xff\xfeid", b"ok"  # pika gives bytes for a short string that is not UTF-8
    method = spec.Basic.Deliver(consumer_tag="c", delivery_tag=3, redelivered=True, exchange="ex", routing_key="rk")

    fast, typed = both_ways(method, props, b"")

    assert fast == typed and b'"body":null' in fast and '"message_id":"\ufffd\ufffdid"'.encode() in fast


def test_the_wire_decoder_gives_pikas_values_for_every_property():
    props = spec.BasicProperties(content_type="text/plain", content_encoding="gzip", delivery_mode=2, priority=9,
                                 correlation_id="c", reply_to="r", expiration="6", message_id="m", timestamp=2**64 - 1,
                                 type="t", user_id="u", app_id="a", cluster_id="cl")
    encoded = b"".join(props.encode())

    ours, pikas = TypedBasicProperties().decode(encoded), spec.BasicProperties().decode(encoded)

    names = [n for n in vars(pikas) if n != "headers"]
    assert [getattr(ours, n) for n in names] == [getattr(pikas, n) for n in names]
    assert ours.headers is None and ours.typed_headers is None
    assert vars(TypedBasicProperties().decode(b"\x00\x00")) == {**dict.fromkeys(names), "_plain_headers": None,
                                                               "typed_headers": None, "raw_headers": None}
