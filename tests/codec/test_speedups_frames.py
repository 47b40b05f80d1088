"""The C scan of framed records checks exactly the records the C reader reads, and keeps what a deep check needs.

``scan_records`` parses each record with the reader's parser but builds no record: it must stop where
``read_records`` stops (a record left to Python, a frame not whole in the buffer, the limit) on any input,
well formed or damaged, and its count, sources and timestamps must be those of the records ``read_records`` builds.
"""

from __future__ import annotations

import struct

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from airflow_rbak.codec import BackupRecord, records
from airflow_rbak.codec.headers import HeaderValue as H
from airflow_rbak.codec.records import decode_record, encode_record
from tests.codec.strategies import small_body_records

pytestmark = pytest.mark.skipif(records.accelerated_scan is None, reason="the C accelerator is not built")
MANY = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


def framed(batch: list[BackupRecord]) -> bytes:
    return b"".join(struct.pack("<I", len(raw)) + raw for raw in map(encode_record, batch))


def expected_scan(payload: bytes | bytearray, pos: int, limit: int, vhost: str, queue: str) -> tuple[int, ...]:
    """What scan_records must answer: computed from the records read_records builds."""
    read, after = records.accelerated_read(payload, pos, limit)
    stamps = [r.backed_up_at for r in read]
    foreign = sum(r.source_vhost != vhost or r.source_queue != queue for r in read)
    extremes = (stamps[0], stamps[-1], min(stamps), max(stamps)) if stamps else (0, 0, 0, 0)
    return (after, len(read), foreign, *extremes)


@MANY
@given(batch=small_body_records(max_size=10), limit=st.integers(0, 12), queue=st.sampled_from(["", "orders"]))
def test_the_scan_keeps_what_the_records_the_c_reader_builds_hold(batch, limit, queue):
    # records with every header variant: the reader leaves some to Python, and the scan must stop there too
    payload = framed(batch)

    assert records.accelerated_scan(payload, 0, limit, "/", queue) == expected_scan(payload, 0, limit, "/", queue)


@MANY
@given(batch=small_body_records(max_size=6), data=st.data())
def test_on_damaged_bytes_the_scan_stops_where_the_c_reader_stops(batch, data):
    payload = bytearray(framed(batch))
    for _ in range(data.draw(st.integers(1, 4))):
        if payload:
            payload[data.draw(st.integers(0, len(payload) - 1))] = data.draw(st.integers(0, 255))
    payload = payload[: data.draw(st.integers(0, len(payload)))]
    start = data.draw(st.integers(-2, len(payload) + 2))

    assert records.accelerated_scan(payload, start, 20, "/", "") == expected_scan(payload, start, 20, "/", "")


def test_timestamps_out_of_order_give_first_last_and_extremes():
    batch = [BackupRecord(body=b"x", backed_up_at=t, source_queue="orders") for t in (40, -5, 2**62, 7)]

    assert records.accelerated_scan(framed(batch), 0, 10, "/", "orders") == (len(framed(batch)), 4, 0, 40, 7, -5, 2**62)


@pytest.mark.parametrize("buffer", [b"", b"\x05\x00\x00", b"\x05\x00\x00\x00{}", b"\x00\x00\x00\x00", b"\x02\x00\x00\x00{}"])
def test_a_frame_not_whole_or_not_a_record_reads_nothing(buffer):
    assert records.accelerated_scan(buffer, 0, 5, "/", "q") == (0, 0, 0, 0, 0, 0, 0)


def test_any_buffer_and_an_offset_past_the_end_are_taken():
    payload = framed([BackupRecord(body=b"x", backed_up_at=3, source_queue="q", source_vhost="v")])

    assert records.accelerated_scan(memoryview(payload), 0, 5, "v", "q") == (len(payload), 1, 0, 3, 3, 3, 3)
    assert records.accelerated_scan(bytearray(payload), 0, 5, "/", "q") == (len(payload), 1, 1, 3, 3, 3, 3)
    assert records.accelerated_scan(payload, len(payload) + 9, 5, "v", "q") == (len(payload) + 9, 0, 0, 0, 0, 0, 0)


def _nested(depth: int) -> bytes:
    """A header value ``depth`` levels deep: Arrays around a Long."""
    return b'{"Array":[' * (depth - 1) + b'{"Long":1}' + b"]}" * (depth - 1)


#: Header values the scan checks in C without building them; each must be taken or refused as the reader does.
HEADER_VALUES = [
    b'"Void"', b'"Vo\\u0069d"', b'"void"', b'{"Bytes":[]}', b'{"Bytes":[0,255,7]}', b'{"Bytes":[256]}',
    b'{"Bytes":[-1]}', b'{"Bytes":[true]}', b'{"Bytes":[1.0]}', b'{"Float":1.5}', b'{"Float":null}', b'{"Float":3}',
    b'{"Float":3.5e38}', b'{"Float":3.3e38}', b'{"Float":-1e-50}', b'{"Float":true}', b'{"Float":01}',
    b'{"Float":1.}', b'{"Float":1e}', b'{"Double":1e308}', b'{"Double":2e308}', b'{"Double":18446744073709551616}',
    b'{"Double":-0.0e+5}', b'{"Double":"1"}', b'{"Table":[]}', b'{"Table":[["a",{"Long":1}],["a","Void"]]}',
    b'{"Table":[["a:b",{"LongString":"https://x"}]]}', b'{"Table":[[1,{"Long":1}]]}', b'{"Table":[["a"]]}',
    b'{"Table":{"a":1}}', b'{"Array":[{"Short":70000}]}', b'{"Array":[{"Timestamp":-1}]}', b'{"Array":["Void",{"Bool":false}]}',
    b'{"Array":[{"Long":1,"Long":2}]}', b'{"Array":[{"Long":1,"Short":2}]}', b'{"Table":[["k",{"Double":1.5,"Double":9}]]}',
    b'{"Array":[{"Nope":1}]}', b'{"Array":[],"Array":[]}', b'{ "Array" : [ { "Long" : 1 } ] }',
    _nested(64), _nested(65), _nested(200),
]


@pytest.mark.parametrize("value", HEADER_VALUES)
def test_the_scan_takes_and_refuses_each_header_value_as_the_c_reader_does(value):
    raw = encode_record(BackupRecord(body=b"x", headers=(("h", H.long(1)),), backed_up_at=3, source_queue="q"))
    record = raw.replace(b'[["h",{"Long":1}]]', b'[["h",' + value + b"]]")
    payload = framed([BackupRecord(body=b"a", backed_up_at=1, source_queue="q")]) + struct.pack("<I", len(record)) + record

    assert records.accelerated_scan(payload, 0, 5, "/", "q") == expected_scan(payload, 0, 5, "/", "q")
    taken = records.accelerated_read(payload, 0, 5)[0][1:]
    if taken:  # what the C reader takes, the Python reader reads the same
        assert decode_record(record).headers == taken[0].headers
