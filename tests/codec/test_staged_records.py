"""A staged record, laid out as its module documents it, reads into its record JSON; a damaged one is a StagedRecordError.

The records here are built by hand from the layout and AMQP 0-9-1, and the
expected JSON is written out, so these tests share no code with the reader
(``tests/capture/test_staged_delivery.py`` holds it to the reader it replaced).
"""

from __future__ import annotations

import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from airflow_rbak.codec.headers import MAX_DEPTH
from airflow_rbak.codec.staged_records import (
    DROPPED_HEADERS,
    QUORUM_BROKER_HEADERS,
    STREAM_BROKER_HEADERS,
    StagedRecordError,
    dropped_code,
    read_staged,
    staged_record,
)
from airflow_rbak.exceptions import RbakError
from tests.codec.strategies import wire_tables

STAMP = 1_712_756_400_123


def short(raw: bytes) -> bytes:
    return bytes([len(raw)]) + raw


def sized(raw: bytes) -> bytes:
    return struct.pack(">I", len(raw)) + raw


def staged(properties: bytes, body: bytes = b"", *, exchange: bytes = b"ex", routing_key: bytes = b"rk", dropped: int = 0,
           head: bytes | None = None) -> bytes:
    """A staged record by the module's layout."""
    head = head if head is not None else struct.pack("<BBBQQ", 1, dropped, 1, STAMP, 7)
    return head + short(exchange) + short(routing_key) + struct.pack("<I", len(properties)) + properties + body


#: content_type, headers (a broker header and one of ours), delivery_mode, timestamp and type, by their presence flags.
PROPERTIES = (struct.pack(">H", 0x8000 | 0x2000 | 0x1000 | 0x0040 | 0x0020) + short(b"text/plain")
              + sized(short(b"x-delivery-count") + b"l" + struct.pack(">q", 2) + short(b"n") + b"I" + struct.pack(">i", -5))
              + b"\x02" + struct.pack(">Q", 1_712_756_400) + short(b"t\xffe"))
EXPECTED = (b'{"body":[104,105],"properties":{"content_type":"text/plain","content_encoding":null,"delivery_mode":2,'
            b'"priority":null,"correlation_id":null,"reply_to":null,"expiration":null,"message_id":null,'
            b'"timestamp":1712756400,"type_field":"t\xef\xbf\xbde","user_id":null,"app_id":null,"cluster_id":null},'
            b'"headers":[["n",{"Long":-5}]],"exchange":"ex","routing_key":"rk","delivery_tag":7,"redelivered":true,'
            b'"backed_up_at":1712756400123,"source_queue":"orders","source_vhost":"/"}')


def test_a_staged_record_is_laid_out_as_documented():
    assert staged_record(b"ex", b"rk", PROPERTIES, b"hi", STAMP, 7, True, 1) == staged(PROPERTIES, b"hi", dropped=1)


def test_a_staged_record_reads_as_the_record_json_with_the_dropped_headers_left_out():
    # Given a quorum queue's delivery, its type not UTF-8 (a record holds text: U+FFFD for the bad byte)
    record = staged(PROPERTIES, b"hi", dropped=DROPPED_HEADERS.index(QUORUM_BROKER_HEADERS))

    # When read, Then it is the record's JSON exactly, and its time
    assert read_staged(record, "orders", "/") == (EXPECTED, STAMP)
    assert read_staged(memoryview(b"padding" + record)[7:], "orders", "/") == (EXPECTED, STAMP)


def test_with_no_header_dropped_the_broker_header_stays():
    record, _ = read_staged(staged(PROPERTIES, b"hi"), "orders", "/")

    assert b'"headers":[["x-delivery-count",{"Long":2}],["n",{"Long":-5}]]' in record


def test_no_properties_and_an_empty_body():
    record, _ = read_staged(staged(b"\x00\x00"), "q", "v")

    assert record.startswith(b'{"body":null,"properties":{"content_type":null,') and b'"headers":[]' in record


def test_continuation_flag_words_and_bytes_after_the_last_property_are_read_past():
    # Given a flag word with its continuation bit, an empty second word, a message id, and two bytes no flag announced
    properties = struct.pack(">HH", 0x0080 | 1, 0) + short(b"m-1") + b"\xff\xff"

    record, _ = read_staged(staged(properties), "q", "v")

    assert b'"message_id":"m-1"' in record


def test_the_dropped_header_codes():
    # A code stands for a queue type, so a record staged before 4.3's x-acquired-count joined the table drops it too
    assert DROPPED_HEADERS == (frozenset(), frozenset({"x-delivery-count", "x-acquired-count"}), frozenset({"x-stream-offset"}))
    assert (QUORUM_BROKER_HEADERS, STREAM_BROKER_HEADERS) == DROPPED_HEADERS[1:]
    assert [dropped_code(t) for t in ("classic", "quorum", "stream")] == [0, 1, 2]


def test_a_quorum_record_leaves_out_every_counter_the_broker_adds_and_keeps_the_publishers_headers():
    table = sized(short(b"x-acquired-count") + b"l" + struct.pack(">q", 24) + short(b"n") + b"I" + struct.pack(">i", -5)
                  + short(b"x-delivery-count") + b"l" + struct.pack(">q", 1))
    properties = struct.pack(">H", 0x2000) + table  # headers only

    record, _ = read_staged(staged(properties, b"hi", dropped=dropped_code("quorum")), "q", "v")

    assert b'"headers":[["n",{"Long":-5}]]' in record


def test_a_record_staged_as_json_by_an_older_version_is_refused_with_what_to_do():
    record = (b'{"body":null,"properties":{},"headers":[],"exchange":"","routing_key":"q","delivery_tag":1,'
              b'"redelivered":false,"backed_up_at":42,"source_queue":"q","source_vhost":"/"}')

    with pytest.raises(StagedRecordError, match="written by an older airflow-rbak; encode it with that version, or take a new backup"):
        read_staged(record, "q", "v")


HEAD = struct.pack("<BBBQQ", 1, 0, 0, 0, 0)


@pytest.mark.parametrize("record, says", [
    (b"\x01\x00", "shorter than its header"),
    (b"\x07" + bytes(18), "format 7"),
    (b"\x01\x05" + bytes(17), "header code 5"),
    (HEAD, "exchange runs past its end"),
    (HEAD + b"\x09ex", "exchange runs past its end"),
    (HEAD + b"\x00\x03rk", "routing key runs past its end"),
    (HEAD + b"\x00\x00\x01\x00", "ends before its property list"),
    (HEAD + b"\x00\x00\xff\x00\x00\x00\x00", "property list of 255 bytes runs past its end"),
    (HEAD + b"\x00\x00\x01\x00\x00\x00\x80", "ends inside a property"),
    (HEAD + b"\x00\x00\x02\x00\x00\x00\x80\x00", "ends inside a property"),
    (HEAD + b"\x00\x00\x04\x00\x00\x00\x80\x00\x05a", "short string of 5 bytes runs past"),
    (HEAD + b"\x00\x00\x03\x00\x00\x00\x00\x40\x09", "ends inside a property"),  # the timestamp's 8 bytes
    (HEAD + b"\x00\x00\x06\x00\x00\x00\x20\x00\x00\x00\x00\x80", "header table runs past"),
    (HEAD + b"\x00\x00\x09\x00\x00\x00\x20\x00" + sized(b"\x01kZ"), "unknown header field type"),
    (HEAD + b"\x01\xff\x00\x00\x00\x00\x00", "exchange is not UTF-8"),
    (HEAD + b"\x00\x02\xc3\x28\x00\x00\x00\x00", "routing key is not UTF-8"),
])
def test_a_damaged_staged_record_says_what_is_wrong(record, says):
    with pytest.raises(StagedRecordError, match=says):
        read_staged(record, "q", "v")


def test_every_cut_before_the_body_is_refused_and_every_cut_in_it_reads():
    record = staged(PROPERTIES, b"hi")
    body_starts = len(record) - 2

    for end in range(len(record) + 1):
        if end < body_starts:
            with pytest.raises(StagedRecordError):
                read_staged(record[:end], "q", "v")
        else:
            assert read_staged(record[:end], "q", "v")[1] == STAMP


def nested(kind: bytes, levels: int, bottom: bytes = b"V") -> bytes:
    """Headers whose one value is ``levels`` tables or arrays deep, ``bottom`` (a Void) at the bottom (built
    outside in)."""
    key = b"" if kind == b"A" else b"\x01k"
    heads = [kind + struct.pack(">I", (levels - 1 - n) * (5 + len(key)) + len(key) + 1) + key for n in range(levels)]
    table = b"\x01k" + b"".join(heads) + bottom
    return struct.pack(">H", 0x2000) + sized(table)


@pytest.mark.parametrize("kind", [b"A", b"F"])
def test_a_table_nested_deep_is_refused_at_once_and_the_deepest_accepted_reads(kind):
    # its bottom is a field of no known type: a reader that went down all 100,000 levels would say so instead
    bomb = staged(nested(kind, 100_000, bottom=b"Z"))
    with pytest.raises(StagedRecordError, match="nested too deep"):
        read_staged(bomb, "q", "v")

    record, _ = read_staged(staged(nested(kind, MAX_DEPTH - 1)), "q", "v")
    assert record.count(b'"Table"' if kind == b"F" else b'"Array"') == MAX_DEPTH - 1


@settings(max_examples=500, deadline=None)
@given(st.sampled_from([b"", HEAD, HEAD + b"\x00\x00"]), st.binary(max_size=200))
def test_any_bytes_are_read_or_refused_with_a_staged_record_error(prefix, tail):
    try:
        read_staged(prefix + tail, "q", "v")
    except StagedRecordError:
        pass


@settings(max_examples=300, deadline=None)
@given(wire_tables, st.integers(0, 2), st.data())
def test_any_header_table_cut_or_changed_is_read_or_refused_with_a_staged_record_error(table, dropped, data):
    properties = bytearray(struct.pack(">H", 0x2000) + table)
    for _ in range(data.draw(st.integers(0, 3))):
        properties[data.draw(st.integers(2, len(properties) - 1))] = data.draw(st.integers(0, 255))
    properties = properties[: data.draw(st.integers(0, len(properties)))]

    try:
        read_staged(staged(bytes(properties), dropped=dropped), "q", "v")
    except StagedRecordError:
        pass


def test_an_exchange_or_routing_key_longer_than_amqp_allows_is_not_staged():
    with pytest.raises(StagedRecordError, match="256 bytes; AMQP allows 255"):
        staged_record(b"x" * 256, b"", b"\x00\x00", b"", 0, 0, False, 0)


def test_the_staged_record_error_is_a_value_error_of_the_package():
    assert issubclass(StagedRecordError, RbakError) and issubclass(StagedRecordError, ValueError)
