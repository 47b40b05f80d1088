"""The publish fast path writes exactly the bytes the typed model writes, for every kind of header table."""

from __future__ import annotations

import dataclasses
import math

import pytest
from hypothesis import given, settings

from airflow_rbak.codec import BackupRecord, decode_record, encode_record
from airflow_rbak.codec.field_table import BINARY_LONGSTR_TAG, TYPE_TAG, encode_table
from airflow_rbak.codec.headers import HeaderValue as H
from airflow_rbak.codec.records import RecordError
from airflow_rbak.restore.wire import ROUTING_HEADERS, left_out_headers, wire_record
from tests.broker.record_reference import properties_from_record
from tests.codec.strategies import small_body_records
from tests.restore.helpers import props_of


def _typed_frame(record: BackupRecord) -> bytes:
    """What the typed model sends for the record: every header but the ones the broker routes by."""
    published = dataclasses.replace(record, headers=tuple(h for h in record.headers if h[0] not in ROUTING_HEADERS))
    return b"".join(properties_from_record(published).encode())


def _check(record: BackupRecord) -> None:
    """The fast path against the typed path on the same stored record (JSON turns non-finite floats into NaN)."""
    stored = encode_record(record)
    wire, record = wire_record(stored), decode_record(stored)
    assert wire.body == record.body
    assert (wire.exchange, wire.routing_key, wire.delivery_tag, wire.backed_up_at) == (
        record.exchange, record.routing_key, record.delivery_tag, record.backed_up_at)
    try:
        expected = _typed_frame(record)
    except Exception as exc:  # noqa: BLE001 - what pika cannot send (a negative timestamp), neither path sends
        with pytest.raises(type(exc)):
            wire.properties.encode()
        with pytest.raises(type(exc)):
            wire.property_list()
        return
    assert b"".join(wire.properties.encode()) == expected
    assert wire.property_list() == expected  # what the publish writes into the content header
    stripped = dataclasses.replace(record, properties=dataclasses.replace(record.properties, user_id=None))
    assert wire.property_list(strip_user_id=True) == _typed_frame(stripped)


@settings(max_examples=150, deadline=None)
@given(small_body_records(max_size=5))
def test_generated_records_give_the_same_wire_bytes(batch):
    for record in batch:
        _check(record)


def test_every_wire_type_including_the_tagged_tables_and_non_finite_floats():
    headers = (*props_of(7).typed_headers, ("nan32", H.float32(math.nan)), ("inf64", H.double(math.inf)),
               ("binary", H.table([(TYPE_TAG, H.short_string(BINARY_LONGSTR_TAG)),
                                   ("value", H.bytes_(b"\xff\xfe"))])),
               ("other-tag", H.table([(TYPE_TAG, H.short_string("future")), ("x", H.long(1))])))
    _check(BackupRecord(body=b"\x00" * 1024, headers=headers, exchange="x", routing_key="rk", delivery_tag=9, backed_up_at=5))
    _check(BackupRecord(body=b""))


def test_cc_and_bcc_are_left_out_of_what_is_published_and_every_other_header_kept_in_order():
    headers = (("CC", H.array([H.long_string("audit")])), ("a", H.long(1)), ("BCC", H.array([H.long_string("x")])),
               ("cc", H.long_string("lower case is not routed by")), ("x-CC", H.long(2)))
    stored = encode_record(BackupRecord(body=b"m", headers=headers))

    wire = wire_record(stored)

    assert wire.properties.raw_headers == encode_table(headers[1:2] + headers[3:])
    assert [h[0] for h in decode_record(stored).headers] == ["CC", "a", "BCC", "cc", "x-CC"]  # the record keeps them


def test_a_record_of_only_routing_headers_is_published_without_a_header_table():
    stored = encode_record(BackupRecord(body=b"m", headers=(("BCC", H.array([H.long_string("victim")])),)))

    assert wire_record(stored).properties.raw_headers is None


@pytest.mark.parametrize(("queue_type", "published"), [
    ("quorum", ["a", "x-stream-offset"]), ("stream", ["x-delivery-count", "x-acquired-count", "a"]),
    ("classic", ["x-delivery-count", "x-acquired-count", "a", "x-stream-offset"])])
def test_headers_a_broker_adds_on_delivery_are_not_republished_for_the_queue_type_that_adds_them(queue_type, published):
    """A record of an earlier version (or another writer) may hold broker state; a publisher's own header of that name
    on a queue type that does not add it is content, and goes through."""
    headers = (("x-delivery-count", H.long(3)), ("x-acquired-count", H.long(24)), ("a", H.long(1)),
               ("x-stream-offset", H.long(7)))
    stored = encode_record(BackupRecord(body=b"m", headers=headers))

    wire = wire_record(stored, left_out_headers(queue_type))

    assert wire.properties.raw_headers == encode_table(tuple(h for h in headers if h[0] in published))


@pytest.mark.parametrize("second", [b',"body":[101,118,105,108]', b',"body":null', b',"bo\\u0064y":[1]'])
def test_a_second_body_key_is_refused_not_published(second):
    stored = encode_record(BackupRecord(body=b"verified"))
    planted = stored[:-1] + second + b"}"

    with pytest.raises(RecordError, match="body"):
        wire_record(planted)
    with pytest.raises(RecordError, match="body"):
        decode_record(planted)
