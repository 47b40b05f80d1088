"""The deep check's streaming pass over a segment's records agrees with the reference reader on everything.

``summarize_payload`` reads the records as the payload streams by and hands anything unusual to the reference
reader (``decode_payload`` + ``iter_payload_records``). These tests hold the streaming pass itself (``_streamed``)
to the reference's summary on well-formed payloads cut into chunks of every small size, with the C accelerator and
without it, and check that a damaged payload gets exactly the reference's error.
"""

from __future__ import annotations

import struct

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from airflow_rbak.codec import (
    BackupRecord,
    CodecError,
    Compression,
    HeaderValue,
    compression,
    encode_payload,
    record_stream,
    records,
)
from airflow_rbak.codec import record_summary as rs
from airflow_rbak.codec.constants import FOOTER_SIZE, HEADER_SIZE
from airflow_rbak.codec.record_summary import RecordSummary, summarize_payload
from airflow_rbak.codec.records import encode_record
from airflow_rbak.codec.segment import read_header
from tests.codec.strategies import small_body_records

CAP = 1 << 24
FEW = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                                                      HealthCheck.function_scoped_fixture])
needs_c = pytest.mark.skipif(records.accelerated_scan is None, reason="the C accelerator is not built")


def framed(raw: list[bytes]) -> bytes:
    return b"".join(struct.pack("<I", len(r)) + r for r in raw)


def sealed(raw: list[bytes], codec: Compression = Compression.ZSTD, count: int | None = None) -> bytes:
    """A segment around records' JSON, stating ``count`` records (default: as many as given)."""
    return encode_payload(framed(raw), len(raw) if count is None else count, 1, 2, codec).data


def both(data: bytes, vhost: str = "/", queue: str = "orders", expected: int | None = None):
    """(the streaming pass's summary or None, the reference reader's summary) of one segment."""
    header = read_header(data, "s")
    size = len(compression.decompress(memoryview(data)[HEADER_SIZE:-FOOTER_SIZE], header.compression, CAP, "s"))
    expected = size if expected is None else expected
    return (rs._streamed(data, header, "s", CAP, expected, vhost, queue),
            rs._reference(data, "s", CAP, expected, vhost, queue))


@pytest.fixture(params=[1, 3, 7, 64, 1 << 20], ids=lambda n: f"chunk-{n}")
def chunk(request, monkeypatch):
    """Decompressed chunks of this many bytes: records, and their length prefixes, split at every place."""
    monkeypatch.setattr(compression, "_CHUNK", request.param)
    monkeypatch.setattr(compression, "_LZ4_INPUT", max(16, request.param))
    return request.param


def test_a_summary_counts_the_records_of_another_queue_and_both_timestamp_readings():
    batch = [BackupRecord(body=b"a", backed_up_at=t, source_queue=q, source_vhost=v)
             for t, q, v in [(50, "orders", "/"), (10, "orders", "/"), (90, "refunds", "/"), (30, "orders", "eu")]]
    data = sealed([encode_record(r) for r in batch])

    streamed, reference = both(data)

    assert streamed == reference == RecordSummary(count=4, foreign=2, first=50, last=30, lowest=10, highest=90)
    assert streamed.readings == ((50, 30), (10, 90))


@pytest.mark.parametrize("codec", list(Compression), ids=lambda c: c.name.lower())
@FEW
@given(batch=small_body_records(max_size=12), queue=st.sampled_from(["orders", ""]))
def test_the_streaming_pass_gives_the_reference_summary_at_every_chunk_size(chunk, codec, batch, queue):
    data = sealed([encode_record(r) for r in batch], codec)

    streamed, reference = both(data, queue=queue)

    assert streamed is not None  # a well-formed payload never falls back to the reference reader
    assert streamed == reference


@FEW
@given(batch=small_body_records(max_size=8))
def test_without_the_accelerator_the_streaming_pass_gives_the_same_summary(chunk, monkeypatch, batch):
    monkeypatch.setattr(records, "accelerated_scan", None)
    monkeypatch.setattr(records, "accelerated_decode", None)
    data = sealed([encode_record(r) for r in batch])

    streamed, reference = both(data)

    assert streamed is not None and streamed == reference


def test_records_the_c_reader_leaves_to_python_are_read_in_the_stream(chunk):
    usual = encode_record(BackupRecord(body=b"x", backed_up_at=5, source_queue="orders"))
    unknown_key = b'{"extra":1,' + usual[1:]
    float_header = encode_record(BackupRecord(body=b"y", backed_up_at=7, source_queue="refunds",
                                              headers=(("h", HeaderValue.double(1.5)),)))
    data = sealed([usual, unknown_key, float_header, usual])

    streamed, reference = both(data)

    assert streamed == reference == RecordSummary(count=4, foreign=1, first=5, last=5, lowest=5, highest=7)


def test_a_record_too_long_to_carry_is_left_to_the_reference_reader(monkeypatch):
    monkeypatch.setattr(compression, "_CHUNK", 64)
    monkeypatch.setattr(record_stream, "CARRY_BYTES", 100)
    long = encode_record(BackupRecord(body=bytes(200), backed_up_at=9, source_queue="orders"))
    data = sealed([encode_record(BackupRecord(body=b"x", backed_up_at=8, source_queue="orders")), long])

    streamed, reference = both(data)
    header = read_header(data, "s")

    assert streamed is None
    assert summarize_payload(data, header, "s", CAP, None, "/", "orders") == reference
    assert reference.count == 2 and reference.highest == 9


GOOD = encode_record(BackupRecord(body=b"hello", backed_up_at=1, source_queue="orders"))
DAMAGED = {
    "not json": [GOOD, b"{not json", GOOD],
    "a field missing": [GOOD, GOOD.replace(b',"redelivered":false', b"")],
    "an empty record": [GOOD, b"", GOOD],
    "a one-byte record": [GOOD, b"{"],
    "a body byte of 256": [GOOD.replace(b"[104,", b"[256,")],
}


@pytest.mark.parametrize("codec", list(Compression), ids=lambda c: c.name.lower())
@pytest.mark.parametrize("case", sorted(DAMAGED))
def test_a_damaged_record_gets_the_reference_readers_error(chunk, codec, case):
    data = sealed(DAMAGED[case], codec)

    assert_same_error(data)


def assert_same_error(data: bytes, expected: int | None = None) -> None:
    header = read_header(data, "s")
    with pytest.raises(CodecError) as reference:
        rs._reference(data, "s", CAP, expected, "/", "orders")
    assert rs._streamed(data, header, "s", CAP, expected, "/", "orders") is None
    with pytest.raises(CodecError) as summarized:
        summarize_payload(data, header, "s", CAP, expected, "/", "orders")
    assert (type(summarized.value), str(summarized.value)) == (type(reference.value), str(reference.value))


PAIR = framed([GOOD, GOOD])
FRAMING = {
    "fewer records than stated": (PAIR, 3),
    "far more records stated than C can count": (PAIR, 2**64 - 1),
    "more records than stated": (PAIR, 1),
    "stray bytes": (PAIR + b"\1\0", 2),
    "a length past the end": (PAIR + struct.pack("<I", 99) + GOOD, 3),
    "a length past any carry": (PAIR + struct.pack("<I", 0xFFFF_FFF0) + GOOD, 3),
}


@pytest.mark.parametrize("codec", list(Compression), ids=lambda c: c.name.lower())
@pytest.mark.parametrize("case", sorted(FRAMING))
def test_framing_and_count_defects_get_the_reference_readers_error(chunk, codec, case):
    payload, count = FRAMING[case]

    assert_same_error(encode_payload(payload, count, 1, 1, codec).data)


def test_size_defects_get_the_reference_readers_error(chunk):
    data = sealed([GOOD, GOOD])
    size = len(PAIR)

    assert_same_error(data, expected=size + 1)  # the manifest's uncompressed size disagrees
    assert_same_error(data, expected=CAP + 1)  # the manifest declares past the cap


@pytest.mark.parametrize("codec", list(Compression), ids=lambda c: c.name.lower())
@FEW
@given(batch=small_body_records(max_size=12))
def test_the_streaming_pass_notes_the_longest_record_frame_at_every_chunk_size(chunk, codec, batch):
    """Given a segment cut into chunks that split records and their length prefixes anywhere,
    when it is summarized with a FrameLengths, then that notes exactly its longest record's frame."""
    raw = [encode_record(r) for r in batch]
    data = sealed(raw, codec)
    frames = rs.FrameLengths()

    rs._streamed(data, read_header(data, "s"), "s", CAP, None, "/", "orders", frames)

    assert frames.finished
    assert frames.longest == max((len(r) for r in raw), default=0)


def test_a_payload_the_streaming_pass_cannot_decide_leaves_the_longest_frame_unknown():
    """Given a record the streaming pass hands to the reference reader (a repeated key),
    when the segment is summarized, then its frames are not called finished: a reader of them must look itself."""
    raw = [encode_record(BackupRecord(body=b"a", backed_up_at=1, source_queue="orders", source_vhost="/"))]
    bad = raw[0][:-1] + b',"exchange":""}'
    data = sealed([bad])
    frames = rs.FrameLengths()

    with pytest.raises(CodecError):
        summarize_payload(data, read_header(data, "s"), "s", CAP, None, "/", "orders", frames)

    assert not frames.finished
