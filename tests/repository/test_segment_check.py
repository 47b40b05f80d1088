"""The deep check of one segment: each record-level defect named once, whichever way the records were read."""

from __future__ import annotations

import struct

import pytest

from airflow_rbak.codec import (
    BackupRecord,
    CodecError,
    Compression,
    SegmentMetadata,
    compression,
    encode_payload,
    record_summary,
)
from airflow_rbak.codec.records import encode_record
from airflow_rbak.codec.segment import decode_payload, iter_payload_records
from airflow_rbak.repository.segment_check import check_segment
from airflow_rbak.storage.memory import MemoryStorage

KEY = "b-1/queues/_default/orders/segment-0001.zst"


def stored(raw: list[bytes], first: int, last: int, codec: Compression = Compression.ZSTD,
           manifest_stamps: tuple[int, int] | None = None) -> tuple[MemoryStorage, SegmentMetadata]:
    """One segment of these records' JSON, its header stating ``first``..``last``, and its manifest entry."""
    payload = b"".join(struct.pack("<I", len(r)) + r for r in raw)
    segment = encode_payload(payload, len(raw), first, last, codec)
    storage = MemoryStorage()
    storage.put(KEY, segment.data)
    meta = segment.metadata(KEY, 1)
    if manifest_stamps is not None:
        meta.first_timestamp, meta.last_timestamp = manifest_stamps
    return storage, meta


def records(*stamps_and_queues: tuple[int, str]) -> list[bytes]:
    return [encode_record(BackupRecord(body=b"payload" * 40, backed_up_at=t, source_queue=q, source_vhost="/"))
            for t, q in stamps_and_queues]


@pytest.fixture(params=["streamed", "carried-in-pieces", "reference-reader"])
def reading(request, monkeypatch):
    """The records read in one stream, in 5-byte chunks (every record carried across them), or by the reference
    reader alone."""
    if request.param == "carried-in-pieces":
        monkeypatch.setattr(compression, "_CHUNK", 5)
    if request.param == "reference-reader":
        monkeypatch.setattr(record_summary, "_streamed", lambda *args: None)
    return request.param


@pytest.mark.parametrize("codec", list(Compression), ids=lambda c: c.name.lower())
def test_a_clean_segment_has_no_defect_and_every_record_is_counted(reading, codec):
    storage, meta = stored(records((1, "orders"), (2, "orders"), (3, "orders")), 1, 3, codec)

    check = check_segment(storage, "/", "orders", meta)

    assert check.ok and check.read, check.defects
    assert (check.records_checked, check.bytes_checked) == (3, meta.size_bytes)


def test_records_of_another_queue_are_one_defect_with_their_number(reading):
    storage, meta = stored(records((1, "orders"), (2, "refunds"), (3, "orders"), (4, "")), 1, 4)

    check = check_segment(storage, "/", "orders", meta)

    assert check.defects == ["2 records name another queue than '/'/'orders'"]
    assert check.records_checked == 4


def test_records_out_of_time_order_may_have_their_smallest_and_largest_stated(reading):
    shuffled = records((30, "orders"), (10, "orders"), (50, "orders"), (20, "orders"))

    storage, meta = stored(shuffled, 10, 50)
    assert check_segment(storage, "/", "orders", meta).ok
    storage, meta = stored(shuffled, 30, 20)
    assert check_segment(storage, "/", "orders", meta).ok


def test_a_header_stating_other_timestamps_than_its_records_is_a_defect(reading):
    storage, meta = stored(records((30, "orders"), (10, "orders"), (50, "orders")), 10, 30)

    check = check_segment(storage, "/", "orders", meta)

    assert check.defects == ["header timestamps are neither its first and last records' nor their smallest and largest"]


def test_a_header_disagreeing_with_the_manifests_timestamps_is_a_defect(reading):
    storage, meta = stored(records((1, "orders"), (2, "orders")), 1, 2, manifest_stamps=(1, 9))

    assert check_segment(storage, "/", "orders", meta).defects == ["header timestamps 1..2 disagree with the manifest's"]


def test_a_record_that_does_not_read_is_named_as_the_reader_names_it(reading):
    raw = records((1, "orders"), (2, "orders"))
    raw[1] = raw[1].replace(b'"redelivered":false', b'"redelivered":0')
    storage, meta = stored(raw, 1, 2)
    header, payload = decode_payload(storage.get(KEY), KEY)
    with pytest.raises(CodecError) as reference:
        list(iter_payload_records(payload, header.record_count, KEY))

    check = check_segment(storage, "/", "orders", meta)

    assert check.defects == [f"{reference.value.reason} at byte {reference.value.offset}"]
    assert "record 1: redelivered: expected true or false" in check.defects[0]
    assert check.records_checked == 0
