"""Round trip: whatever we encode decodes to the same records, with our reader and an independent one."""

from __future__ import annotations

import hashlib
import json
import random

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from airflow_rbak.codec import BackupRecord, Compression, decode_segment, encode_segment
from airflow_rbak.codec.records import decode_record, encode_record
from tests.codec.independent_reader import read_segment
from tests.codec.spec_json import PROPERTY_ORDER, RECORD_ORDER, expected_record_json
from tests.codec.strategies import records

COMPRESSIONS = [Compression.NONE, Compression.ZSTD, Compression.LZ4]
SLOW_OK = settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


@pytest.mark.parametrize("compression", COMPRESSIONS, ids=lambda c: c.name.lower())
@SLOW_OK
@given(batch=st.lists(records, max_size=6))
def test_encode_then_decode_is_identity(compression, batch):
    segment = encode_segment(batch, compression)

    decoded = decode_segment(segment.data, name="prop")

    assert decoded.records == batch
    assert decoded.header.record_count == len(batch)
    assert segment.sha256 == hashlib.sha256(segment.data).hexdigest()


@pytest.mark.parametrize("compression", COMPRESSIONS, ids=lambda c: c.name.lower())
@SLOW_OK
@given(batch=st.lists(records, max_size=6))
def test_an_independent_reader_sees_the_spec_json(compression, batch):
    segment = encode_segment(batch, compression)

    header, objects = read_segment(segment.data)

    assert header["compression"] == int(compression)
    assert header["record_count"] == len(batch)
    assert header["first_timestamp"] == (batch[0].backed_up_at if batch else 0)
    assert header["last_timestamp"] == (batch[-1].backed_up_at if batch else 0)
    assert objects == [expected_record_json(r) for r in batch]
    assert all(list(o) == list(RECORD_ORDER) for o in objects)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(record=records)
def test_records_are_written_compact_in_spec_order_and_read_in_any_order(record):
    raw = encode_record(record)
    obj = json.loads(raw)

    assert obj == expected_record_json(record)
    assert list(obj) == list(RECORD_ORDER)
    assert list(obj["properties"]) == list(PROPERTY_ORDER)
    if b"Float" not in raw and b"Double" not in raw:  # float spelling is the one free choice
        assert raw == json.dumps(obj, separators=(",", ":"), ensure_ascii=False).encode()
    shuffled = json.dumps(dict(reversed(list(obj.items())))).encode()
    assert decode_record(shuffled) == record


@pytest.mark.parametrize("compression", COMPRESSIONS, ids=lambda c: c.name.lower())
def test_one_mib_bodies_survive_every_compression(compression):
    batch = [BackupRecord(body=random.Random(i).randbytes(1 << 20), backed_up_at=i) for i in range(3)]

    segment = encode_segment(batch, compression)

    assert decode_segment(segment.data).records == batch
    assert [bytes(o["body"]) for o in read_segment(segment.data)[1]] == [r.body for r in batch]


def test_empty_body_is_written_as_null_and_read_back_empty():
    raw = encode_record(BackupRecord(body=b""))

    assert raw.startswith(b'{"body":null,')
    assert decode_record(raw).body == b""
