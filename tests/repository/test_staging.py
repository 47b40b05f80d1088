"""Staging: chunks named so that a key sort is capture order, each a complete RBAK segment."""

from __future__ import annotations

import pytest

from airflow_rbak.codec import BackupRecord, Compression, decode_segment, encode_record
from airflow_rbak.exceptions import ConfigurationError
from airflow_rbak.repository.staging import StagingWriter, chunk_key, delete_staging, list_chunks
from airflow_rbak.storage import open_storage
from airflow_rbak.storage.base import StorageError
from airflow_rbak.storage.memory import MemoryStorage


def record(i: int) -> BackupRecord:
    return BackupRecord(body=i.to_bytes(4, "big") * 8, delivery_tag=i + 1, backed_up_at=1000 + i, source_queue="q")


def test_chunk_keys_have_eight_digits_and_the_compression_extension():
    assert chunk_key("b1", "/", "orders", 7, Compression.ZSTD) == "b1/staging/_default/orders/chunk-00000007.zst"
    assert chunk_key("b1", "prod", "a/b", 12, Compression.NONE) == "b1/staging/prod/a%2Fb/chunk-00000012"
    with pytest.raises(ConfigurationError, match="start at 1"):
        chunk_key("b1", "/", "q", 0, Compression.LZ4)


def write(storage, count: int, **kwargs: object) -> list:
    chunks = []
    writer = StagingWriter(storage, "b1", "/", "q", on_chunk=chunks.append, **kwargs)
    for i in range(count):
        writer.add(encode_record(record(i)), record(i).backed_up_at)
    writer.flush()
    return chunks


@pytest.mark.parametrize("compression", list(Compression), ids=lambda c: c.name.lower())
def test_records_come_back_in_order_across_chunks(compression):
    storage = open_storage("memory://")

    chunks = write(storage, 25, max_records=10, compression=compression)

    assert [(c.sequence, c.record_count) for c in chunks] == [(1, 10), (2, 10), (3, 5)]
    keys = list_chunks(storage, "b1", "/", "q")
    assert keys == [c.key for c in chunks]
    decoded = [r for key in keys for r in decode_segment(storage.get(key), name=key).records]
    assert decoded == [record(i) for i in range(25)]


def test_a_chunk_is_stored_once_it_reaches_the_byte_limit():
    storage = open_storage("memory://")

    chunks = write(storage, 6, max_bytes=1)  # every record exceeds one byte

    assert [c.record_count for c in chunks] == [1] * 6


def test_chunk_header_carries_the_first_and_last_capture_times():
    storage = open_storage("memory://")

    (chunk,) = write(storage, 3)

    header = decode_segment(storage.get(chunk.key), name=chunk.key).header
    assert (header.record_count, header.first_timestamp, header.last_timestamp) == (3, 1000, 1002)


def test_a_resumed_writer_continues_the_numbering_and_key_order_stays_capture_order():
    storage = open_storage("memory://")
    write(storage, 9, max_records=1)  # chunks 1..9

    writer = StagingWriter(storage, "b1", "/", "q", next_sequence=10, max_records=1)
    writer.add(encode_record(record(9)), 0)

    keys = list_chunks(storage, "b1", "/", "q")
    assert [k.rsplit("-", 1)[1] for k in keys] == [f"{n:08d}.zst" for n in range(1, 11)]


def test_flush_with_nothing_buffered_stores_nothing():
    storage = open_storage("memory://")

    assert StagingWriter(storage, "b1", "/", "q").flush() is None
    assert list_chunks(storage, "b1", "/", "q") == []


def test_delete_staging_removes_only_that_queue():
    storage = open_storage("memory://")
    write(storage, 3, max_records=1)
    StagingWriter(storage, "b1", "/", "other").add(encode_record(record(0)), 0)
    StagingWriter(storage, "b1", "/", "other", max_records=1).add(encode_record(record(0)), 0)

    assert delete_staging(storage, "b1", "/", "q") == 3
    assert list_chunks(storage, "b1", "/", "q") == [] and len(list_chunks(storage, "b1", "/", "other")) == 1


def test_limits_must_be_positive():
    with pytest.raises(ConfigurationError, match="positive"):
        StagingWriter(open_storage("memory://"), "b1", "/", "q", max_records=0)


@pytest.mark.parametrize(("limits", "expected"), [
    ({"max_records": 10}, [(1, 10, 10), (2, 10, 20), (3, 5, 25)]),
    ({"max_bytes": 1}, [(n, 1, n) for n in range(1, 26)]),  # every record outgrows the reused buffer
])
def test_in_the_background_chunks_are_stored_in_order_with_the_state_at_their_last_record(limits, expected):
    # Given a background writer whose caller counts records as it adds them
    storage, chunks, added = open_storage("memory://"), [], [0]
    writer = StagingWriter(storage, "b1", "/", "q", on_chunk=chunks.append, seal_state=lambda: added[0], background=True,
                           **limits)

    # When 25 records are added and flushed
    for i in range(25):
        added[0] += 1
        writer.add(encode_record(record(i)), record(i).backed_up_at)
    writer.flush()
    writer.close()

    # Then every chunk is stored, in order, each with the count as it closed, and the records read back in order
    assert [(c.sequence, c.record_count, c.state) for c in chunks] == expected
    keys = list_chunks(storage, "b1", "/", "q")
    assert [r for key in keys for r in decode_segment(storage.get(key), name=key).records] == [record(i) for i in range(25)]


class FailingPuts(MemoryStorage):
    def put(self, key: str, data: bytes) -> None:
        raise StorageError(f"disk full writing {key}")


def test_a_background_store_that_fails_raises_at_flush_and_close_does_not_hide_it():
    writer = StagingWriter(FailingPuts(), "b1", "/", "q", max_records=2, background=True)
    for i in range(3):
        writer.add(encode_record(record(i)), 0)  # the first chunk is handed over here and fails on the thread

    with pytest.raises(StorageError, match="disk full"):
        writer.flush()
    writer.close()  # nothing left to raise: the error was reported once
