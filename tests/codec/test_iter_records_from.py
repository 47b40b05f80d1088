"""iter_records_from: a few records from anywhere in a segment, decompressing only as far as they are read."""

from __future__ import annotations

import pytest

from airflow_rbak.codec import BackupRecord, CodecError, iter_records
from airflow_rbak.codec.constants import Compression
from airflow_rbak.codec.segment import encode_segment, iter_records_from

#: 1,500 records of about 1 KiB: a payload over the 1 MiB the decompressor hands out at a time, so records straddle.
RECORDS = [BackupRecord(body=bytes([i % 251]) * (1000 + i % 37), routing_key=f"k{i}", backed_up_at=i) for i in range(1500)]


@pytest.mark.parametrize("compression", list(Compression), ids=lambda c: c.name.lower())
def test_from_any_start_it_yields_the_same_records_as_the_whole_read_with_their_index(compression):
    data = encode_segment(RECORDS, compression).data
    whole = list(iter_records(data))

    for start in (0, 1, 777, 1499, 1500):
        assert list(iter_records_from(data, start)) == list(enumerate(whole))[start:]


def test_a_damaged_segment_is_refused_before_any_record_and_a_reader_may_stop_early():
    data = bytearray(encode_segment(RECORDS, Compression.NONE).data)
    data[-200] ^= 0xFF  # inside the last record's body; the CRC then no longer matches
    with pytest.raises(CodecError):
        next(iter_records_from(bytes(data)))
    intact = encode_segment(RECORDS, Compression.NONE).data

    first = iter_records_from(intact, 3)
    assert [next(first) for _ in range(2)] == [(3, RECORDS[3]), (4, RECORDS[4])]
