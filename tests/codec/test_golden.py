"""The spec's byte-level example, built by hand, against our reader and writer."""

from __future__ import annotations

import struct
import zlib

import zstandard

from airflow_rbak.codec import BackupProperties, BackupRecord, Compression, decode_segment, encode_segment
from airflow_rbak.codec.records import encode_record

# The RBAK specification's byte-level example (docs/format.md): the header of a one-record zstd segment.
SPEC_HEADER = bytes.fromhex(
    "52 42 41 4B"  # RBAK
    "01"  # version 1
    "01"  # zstd
    "00 00"  # reserved
    "01 00 00 00 00 00 00 00"  # one record
    "CB 04 A7 D2 8E 01 00 00"  # first timestamp
    "CB 04 A7 D2 8E 01 00 00"  # last timestamp
)
TIMESTAMP = struct.unpack("<q", bytes.fromhex("CB04A7D28E010000"))[0]

# The specification's record example (with the header's timestamp), as serde writes it: compact, spec order.
SPEC_RECORD_JSON = (
    b'{"body":[98,121,116,101,115],"properties":{"content_type":"application/json","content_encoding":null,'
    b'"delivery_mode":2,"priority":null,"correlation_id":null,"reply_to":null,"expiration":null,'
    b'"message_id":"msg-001","timestamp":null,"type_field":null,"user_id":null,"app_id":"my-service",'
    b'"cluster_id":null},"headers":[],"exchange":"orders.exchange","routing_key":"order.created",'
    b'"delivery_tag":42,"redelivered":false,"backed_up_at":' + str(TIMESTAMP).encode() + b',"source_queue":"orders",'
    b'"source_vhost":"/"}'
)
SPEC_RECORD = BackupRecord(
    body=b"bytes",
    properties=BackupProperties(content_type="application/json", delivery_mode=2, message_id="msg-001", app_id="my-service"),
    exchange="orders.exchange",
    routing_key="order.created",
    delivery_tag=42,
    backed_up_at=TIMESTAMP,
    source_queue="orders",
    source_vhost="/",
)


def hand_built_segment() -> bytes:
    payload = struct.pack("<I", len(SPEC_RECORD_JSON)) + SPEC_RECORD_JSON
    body = SPEC_HEADER + zstandard.ZstdCompressor(level=3).compress(payload)
    return body + struct.pack("<I", zlib.crc32(body)) + b"KABR"


def test_the_hand_built_spec_segment_decodes_to_the_spec_record():
    decoded = decode_segment(hand_built_segment(), name="golden")

    assert decoded.records == [SPEC_RECORD]
    assert decoded.header.compression is Compression.ZSTD
    assert decoded.header.first_timestamp == decoded.header.last_timestamp == TIMESTAMP


def test_our_writer_reproduces_the_spec_header_byte_for_byte():
    segment = encode_segment([SPEC_RECORD], Compression.ZSTD, 3)

    assert segment.data[:32] == SPEC_HEADER
    assert segment.data[32:36] == bytes.fromhex("28 B5 2F FD")  # a zstd frame follows, as the example shows
    assert segment.data[-4:] == b"KABR"


def test_our_writer_reproduces_the_whole_hand_built_segment():
    assert encode_record(SPEC_RECORD) == SPEC_RECORD_JSON
    assert encode_segment([SPEC_RECORD], Compression.ZSTD, 3).data == hand_built_segment()
