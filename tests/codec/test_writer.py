"""SegmentWriter: rotation by size and by age, one buffer reused for every segment, nothing lost on a bad record.

Each test runs with the C accelerator and without it (the pure-Python writer).
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import pytest

from airflow_rbak.codec import BackupRecord, Compression, SegmentWriter, decode_segment, records
from airflow_rbak.codec.records import RecordError, encode_record

ACCELERATED = ("accelerated_encode", "accelerated_decode", "accelerated_append", "accelerated_read")


@pytest.fixture(params=["accelerated", "pure-python"])
def codec_build(request, monkeypatch):
    if request.param == "pure-python":
        for name in ACCELERATED:
            monkeypatch.setattr(records, name, None)
    return request.param


def record(i: int, size: int = 100, at: int | None = None) -> BackupRecord:
    return BackupRecord(body=bytes([i % 256]) * size, delivery_tag=i, backed_up_at=1000 + i if at is None else at)


def framed_size(r: BackupRecord) -> int:
    return 4 + len(encode_record(r))


def test_a_segment_is_sealed_once_its_payload_reaches_the_size_limit(codec_build):
    batch = [record(i) for i in range(10)]
    writer = SegmentWriter(Compression.NONE, segment_max_bytes=3 * framed_size(batch[0]))

    sealed = [s for r in batch for s in writer.add(r)]

    assert [s.record_count for s in sealed] == [3, 3, 3]
    assert writer.pending_records == 1 and writer.pending_bytes == framed_size(batch[9])
    assert [r for s in sealed + [writer.flush()] for r in decode_segment(s.data).records] == batch


def test_a_record_as_old_as_the_interval_after_the_first_starts_a_new_segment(codec_build):
    batch = [record(0, at=0), record(1, at=59_999), record(2, at=60_000), record(3, at=60_001)]
    writer = SegmentWriter(Compression.ZSTD, segment_max_interval_ms=60_000)

    sealed = [s for r in batch for s in writer.add(r)]

    assert [decode_segment(s.data).records for s in sealed] == [batch[:2]]
    assert decode_segment(writer.flush().data).records == batch[2:]


def test_a_shorter_segment_after_a_longer_one_holds_only_its_own_records(codec_build):
    """The buffer is kept between segments: bytes left from the first must not reach the second."""
    big, small = record(1, size=5000), record(2, size=10)
    writer = SegmentWriter(Compression.NONE, segment_max_bytes=framed_size(big))

    first = writer.add(big)
    writer.add(small)
    second = writer.flush()

    assert decode_segment(first[0].data).records == [big]
    assert decode_segment(second.data).records == [small]
    assert second.uncompressed_bytes == framed_size(small)


def test_a_record_that_cannot_be_written_changes_nothing_and_loses_no_sealed_segment(codec_build):
    writer = SegmentWriter(Compression.LZ4, segment_max_interval_ms=10)
    writer.add(record(0, at=0))
    bad = BackupRecord(body=b"x", exchange="\ud800", backed_up_at=100)  # a lone surrogate is not JSON

    with pytest.raises(RecordError):
        writer.add(bad)

    assert writer.pending_records == 1
    assert decode_segment(writer.flush().data).records == [record(0, at=0)]


def test_records_added_as_json_and_as_records_make_the_same_segment(codec_build):
    batch = [record(i, size=i * 13) for i in range(20)]
    as_records, as_json = SegmentWriter(Compression.NONE), SegmentWriter(Compression.NONE)

    for r in batch:
        as_records.add(r)
        as_json.add_encoded(encode_record(r), r.backed_up_at)

    assert as_records.flush().data == as_json.flush().data


def json_records(count: int) -> list[tuple[bytes, int]]:
    """Records of varied sizes, some an interval apart, as (JSON, backed_up_at)."""
    return [(encode_record(record(i, size=(i * 37) % 900, at=1000 + i + 5000 * (i % 17 == 0))), 1000 + i + 5000 * (i % 17 == 0))
            for i in range(count)]


@pytest.mark.parametrize("ahead", [1, 3])
def test_segments_compressed_on_a_pool_while_the_next_fills_are_the_same_segments_in_order(ahead):
    batch = json_records(400)
    plain = [s.data for s in SegmentWriter(Compression.ZSTD, 3, 20_000, 4000).seal_all(batch)]

    with ThreadPoolExecutor(2) as pool:
        pooled = [s.data for s in SegmentWriter(Compression.ZSTD, 3, 20_000, 4000).seal_all(batch, pool, ahead)]

    assert len(plain) > 5
    assert pooled == plain


def test_an_error_of_the_records_reaches_the_caller_of_a_pooled_writer():
    def failing():
        yield from json_records(100)
        raise ValueError("staged chunk 3 is damaged")

    with ThreadPoolExecutor(1) as pool, pytest.raises(ValueError, match="chunk 3"):
        list(SegmentWriter(Compression.ZSTD, 3, 5_000).seal_all(failing(), pool))
