"""The publish fast path writes exactly the bytes the typed model writes, for every kind of header table."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings

from airflow_rbak.codec import BackupRecord, decode_record, encode_record
from airflow_rbak.codec.field_table import BINARY_LONGSTR_TAG, TYPE_TAG
from airflow_rbak.codec.headers import HeaderValue as H
from airflow_rbak.restore.wire import wire_record
from tests.broker.record_reference import properties_from_record
from tests.codec.strategies import small_body_records
from tests.restore.helpers import props_of


def _typed_frame(record: BackupRecord) -> bytes:
    return b"".join(properties_from_record(record).encode())


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
        return
    assert b"".join(wire.properties.encode()) == expected


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
