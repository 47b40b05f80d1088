"""The C accelerator is an accelerator only: it must agree with the pure-Python codec on everything.

Its reader either builds exactly the record the Python path builds or answers
None (then the Python path reads the record, or names its defect); its writer
writes exactly the bytes the Python path writes. These tests compare the two
on generated records, on the same records written in other valid JSON
spellings, and on damaged JSON.
"""

from __future__ import annotations

import json
import random
import struct

import numpy
import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from airflow_rbak.codec import BackupProperties, BackupRecord, Compression, HeaderValue, SegmentWriter, decode_segment, records
from airflow_rbak.codec.constants import MAX_SEGMENT_MAX_BYTES
from airflow_rbak.codec.properties import PROPERTIES
from airflow_rbak.codec.records import RecordError, decode_record, encode_record, record_from_json
from airflow_rbak.codec.segment import iter_payload_records
from airflow_rbak.codec.staged_records import StagedRecordError, read_staged_here, staged_record
from tests.codec.strategies import records as any_records
from tests.codec.strategies import short_strings, text, wire_tables

ACCELERATED = ("accelerated_encode", "accelerated_decode", "accelerated_append", "accelerated_read", "accelerated_scan",
               "accelerated_staged")
MANY = settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
FEW = settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
# Where no compiler was available only the first test fails (loudly) and the pure-Python tests still run.
needs_c = pytest.mark.skipif(records._speedups is None, reason="the C accelerator is not built")
# Everything after the body of a minimal record: `{"body":[120],` is 14 characters.
TAIL = encode_record(BackupRecord(body=b"x")).decode()[14:]


def python_json(record: BackupRecord) -> bytes:
    """What the pure-Python writer produces (the body through numpy, not the C body writer ``to_json`` may use)."""
    obj = record.to_json()
    if record.body:
        obj["body"] = numpy.frombuffer(record.body, numpy.uint8)
    return orjson.dumps(obj, option=orjson.OPT_SERIALIZE_NUMPY)


def python_record(raw: bytes) -> BackupRecord:
    """What the pure-Python reader produces (or its RecordError)."""
    try:
        obj = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise RecordError(str(exc)) from None
    return record_from_json(obj)


def test_the_accelerator_is_built_here():
    missing = [name for name in ACCELERATED if getattr(records, name) is None]

    assert not missing, "setup.py's C extension did not build; the codec runs slower"
    assert records.format_byte_array is not None, "the C extension was built from an older source: reinstall"


@settings(max_examples=200, deadline=None)
@given(body=st.one_of(st.binary(max_size=2000), st.sampled_from([b"", b"\x00", bytes(range(256)), b"\xff" * 70_000])))
def test_the_c_body_writer_writes_what_orjson_writes_from_a_uint8_array(body):
    assert records.format_byte_array(body) == orjson.dumps(numpy.frombuffer(body, numpy.uint8), option=orjson.OPT_SERIALIZE_NUMPY)


@needs_c
@MANY
@given(record=any_records)
def test_the_c_writer_writes_the_python_writers_bytes(record):
    assert records.accelerated_encode(record) == python_json(record)


@needs_c
@MANY
@given(record=any_records)
def test_the_c_reader_builds_the_python_readers_record(record):
    raw = python_json(record)

    fast = records.accelerated_decode(raw)

    assert fast is not None, "a record our own writer wrote must take the fast path"
    assert fast == python_record(raw) == record
    assert type(fast.properties) is BackupProperties and all(type(v) is HeaderValue for _, v in fast.headers)


@needs_c
@FEW
@given(record=any_records, data=st.data())
def test_other_valid_spellings_read_the_same_through_either_path(record, data):
    """Keys in another order, whitespace, \\u escapes: the C reader reads them or leaves them to Python."""
    obj = json.loads(python_json(record))
    if data.draw(st.booleans(), label="shuffle keys"):
        items = list(obj.items())
        random.Random(data.draw(st.integers(0, 99), label="seed")).shuffle(items)
        obj = dict(items)
    raw = json.dumps(
        obj, ensure_ascii=data.draw(st.booleans(), label="ascii"), indent=data.draw(st.sampled_from([None, 0, 2]), label="indent")
    ).encode()

    fast = records.accelerated_decode(raw)

    assert fast is None or fast == python_record(raw)
    assert decode_record(raw) == record


@needs_c
@FEW
@given(record=any_records, data=st.data())
def test_damaged_json_is_never_read_differently_by_the_c_reader(record, data):
    """The C reader accepts nothing the Python path refuses, and builds nothing it would build differently."""
    raw = bytearray(python_json(record))
    for _ in range(data.draw(st.integers(1, 3), label="damages")):
        at = data.draw(st.integers(0, len(raw) - 1), label="at")
        if data.draw(st.booleans(), label="cut"):
            del raw[at:]
            if not raw:
                break
        else:
            raw[at] = data.draw(st.sampled_from(b'0129:,"[]{}\\ nu-.e\x00\xff\xc3'), label="byte")
    raw = bytes(raw)

    fast = records.accelerated_decode(raw)

    if fast is not None:
        assert fast == python_record(raw)


def body_reader_record(raw: bytes) -> BackupRecord | None:
    """What the body-array path (C body reader, orjson for the rest) reads, or None; its errors are the Python path's."""
    return records._decode_with_body_reader(raw)


@needs_c
@MANY
@given(record=any_records, data=st.data())
def test_the_body_reader_path_reads_what_the_python_reader_reads_and_nothing_it_refuses(record, data):
    """Records the C reader leaves to Python go through the body-array path first: it must agree on everything."""
    raw = bytearray(python_json(record))
    if data.draw(st.booleans(), label="damage"):
        at = data.draw(st.integers(0, len(raw) - 1), label="at")
        raw[at] = data.draw(st.sampled_from(b'0129:,"[]{}\\ nu-.e\x00\xff\xc3'), label="byte")
    raw = bytes(raw)
    try:
        expected: BackupRecord | type[RecordError] = python_record(raw)
    except RecordError:
        expected = RecordError

    try:
        got: BackupRecord | type[RecordError] | None = body_reader_record(raw)
    except RecordError:
        got = RecordError

    assert got is None or got == expected
    if record.body and raw == python_json(record):  # an empty body is written null: the generic path reads it
        assert got == record


@pytest.mark.parametrize("raw", [b'{"body":[1],}', b'{"body":[1]}', b'{"body":[1] ,"x":1}', b'{"body":[1],"body":null}',
                                 b'{"body":[1]X' + TAIL.encode()[1:]])
def test_the_body_reader_path_leaves_odd_shapes_to_the_python_path(raw):
    assert records.parse_byte_array is None or body_reader_record(raw) is None


@given(body=st.binary(max_size=300), spaces=st.sampled_from(["", " ", "\n\t"]))
def test_json_whitespace_inside_the_body_array_is_accepted(body, spaces):
    values = f",{spaces}".join(str(b) for b in body)
    raw = ('{"body":[' + spaces + values + spaces + "]," + TAIL).encode()

    assert decode_record(raw).body == body


@needs_c
@settings(max_examples=200, deadline=None)
@given(
    body=st.binary(max_size=400),
    damage=st.lists(st.tuples(st.integers(0, 2000), st.sampled_from(b"0129,] \t-x\xff")), max_size=3),
)
def test_the_vector_and_the_careful_body_loops_read_the_same(body, damage):
    """The SSSE3 loop (where the CPU has it) and the digit-by-digit loop: same bytes, same first defect."""
    raw = bytearray(("[" + ",".join(map(str, body)) + "]").encode() + b',"rest":0}')
    for at, byte in damage:
        raw[at % len(raw)] = byte
    results = []
    for vectors in (True, False):
        previous = records._speedups.vectors(vectors)
        try:
            results.append(records._speedups.parse_byte_array(bytes(raw), 1))
        except ValueError as exc:
            results.append(str(exc))
        finally:
            records._speedups.vectors(previous)

    assert results[0] == results[1]
    if not damage:
        assert results[0] == (body, len(raw) - len(b',"rest":0}'))


def test_the_hand_built_record_tail_is_valid():
    assert decode_record(('{"body":[7,255],' + TAIL).encode()).body == b"\x07\xff"


@needs_c
@pytest.mark.parametrize("array", ["[256]", "[01]", "[1,,2]", "[-1]", "[1.0]", "[1,]", "[1", '["1"]', "[1 2]", "[1000]"])
def test_malformed_body_arrays_are_refused_on_both_paths(array, monkeypatch):
    raw = ('{"body":' + array + "," + TAIL).encode()

    assert records.accelerated_decode(raw) is None
    with pytest.raises(RecordError):
        decode_record(raw)
    for name in ACCELERATED:
        monkeypatch.setattr(records, name, None)
    with pytest.raises(RecordError):
        decode_record(raw)


@needs_c
def test_records_the_c_writer_cannot_write_are_left_to_python():
    """A field of an unexpected type: the C writer answers None, and the Python path decides."""
    odd = BackupRecord(body=bytearray(b"ab"), exchange="x")
    surrogate = BackupRecord(body=b"ab", exchange="\ud800")

    assert records.accelerated_encode(odd) is None and encode_record(odd) == python_json(odd)
    assert records.accelerated_encode(surrogate) is None
    with pytest.raises(RecordError):
        encode_record(surrogate)


@needs_c
@FEW
@given(batch=st.lists(any_records, max_size=5), start=st.integers(0, 40))
def test_framing_into_the_writers_buffer_matches_the_python_framing(batch, start):
    buffer, expected, used = bytearray(b"\xee" * start), bytearray(), start
    for record in batch:
        raw = python_json(record)
        expected += struct.pack("<I", len(raw)) + raw
        used = records.accelerated_append(buffer, used, record)
        assert used == start + len(expected)

    assert bytes(buffer[start:used]) == bytes(expected)
    assert bytes(buffer[:start]) == b"\xee" * start


@needs_c
def test_a_record_longer_than_the_room_set_aside_for_it_is_framed_the_same():
    """The C framing sets aside 4 bytes per body byte and 512 more; past that it writes the record apart."""
    long_names = BackupRecord(body=b"ab", exchange="x" * 5000, headers=(("h", HeaderValue.double(1.5)),))
    buffer = bytearray(b"zz")

    end = records.accelerated_append(buffer, 1, long_names)

    raw = python_json(long_names)
    assert bytes(buffer[:end]) == b"z" + struct.pack("<I", len(raw)) + raw


@needs_c
def test_a_batch_stops_before_a_record_left_to_python_and_the_reader_goes_on():
    good = [BackupRecord(body=bytes([i]), delivery_tag=i) for i in range(3)]
    unusual = b'{"extra":1,' + python_json(good[0])[1:]  # an unknown key: only the Python path ignores it
    payload = b"".join(struct.pack("<I", len(r)) + r for r in [python_json(good[0]), unusual, python_json(good[2])])

    batch, after = records.accelerated_read(payload, 0, 10)

    assert batch == good[:1] and after == 4 + len(python_json(good[0]))
    assert list(iter_payload_records(payload, 3)) == [good[0], good[0], good[2]]


@pytest.mark.parametrize("compression", list(Compression), ids=lambda c: c.name.lower())
@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(batch=st.lists(any_records, max_size=6))
def test_without_the_accelerator_records_still_round_trip(compression, batch):
    with pytest.MonkeyPatch.context() as patch:
        for name in ACCELERATED:
            patch.setattr(records, name, None)
        writer = SegmentWriter(compression, segment_max_bytes=MAX_SEGMENT_MAX_BYTES)
        segments = [s for record in batch for s in writer.add(record)] + [writer.flush()]

        assert [r for s in segments if s is not None for r in decode_segment(s.data).records] == batch


@needs_c
def test_without_the_accelerator_the_writer_produces_the_same_segments(monkeypatch):
    batch = [BackupRecord(body=random.Random(i).randbytes(i * 7), delivery_tag=i, backed_up_at=i) for i in range(50)]

    def segments():
        writer = SegmentWriter(Compression.NONE, segment_max_bytes=2000)
        out = [s for record in batch for s in writer.add(record)]
        return [s.data for s in out + [writer.flush()]]

    fast = segments()
    for name in ACCELERATED:
        monkeypatch.setattr(records, name, None)

    assert segments() == fast
    assert [r for data in fast for r in decode_segment(data).records] == batch


#: A property's wire bytes by its type in codec/properties.py: a short string, an octet, a timestamp.
_WIRE_VALUE = {"shortstr": short_strings.map(lambda raw: bytes([len(raw)]) + raw), "octet": st.binary(min_size=1, max_size=1),
               "timestamp": st.binary(min_size=8, max_size=8)}


@st.composite
def property_lists(draw: st.DrawFn) -> bytes:
    """Any basic property list: each property present or not, a header table sometimes, at times a second flag
    word or bytes after the last property."""
    flags, values = 0, []
    for i, prop in enumerate(PROPERTIES):
        if i == 2 and draw(st.booleans()):  # the header table comes third on the wire
            flags |= 1 << 13
            values.append(draw(wire_tables))
        if draw(st.booleans()):
            flags |= 1 << (15 - i if i < 2 else 14 - i)
            values.append(draw(_WIRE_VALUE[prop.kind]))
    more = draw(st.sampled_from([b"", b"", b"\x00\x00", b"\x00\x01\x00\x00"]))
    if more:
        flags |= 1
    return struct.pack(">H", flags) + more[2:] + b"".join(values) + draw(st.sampled_from([b"", b"\x00", b"junk"]))


#: Exchange and routing key: mostly text, at times bytes that are not UTF-8 (which a record cannot hold).
_names = st.one_of(text.map(str.encode), text.map(str.encode), short_strings).filter(lambda raw: len(raw) <= 255)
staged_records_any = st.builds(
    staged_record, _names, _names, property_lists(), st.binary(max_size=300), st.integers(0, 2**64 - 1),
    st.integers(0, 2**64 - 1), st.booleans(), st.integers(0, 2),
)


def python_staged(staged: bytes | memoryview) -> tuple[bytes, int] | str:
    try:
        return read_staged_here(staged, "orders", "/")
    except StagedRecordError:
        return "refused"


@needs_c
@MANY
@given(staged=staged_records_any, data=st.data())
def test_the_c_staged_reader_writes_what_the_python_reader_writes_or_leaves_the_record_to_it(staged, data):
    damaged = bytearray(staged)
    if data.draw(st.booleans()):
        damaged = damaged[: data.draw(st.integers(0, len(damaged)))]
    if damaged and data.draw(st.booleans()):
        damaged[data.draw(st.integers(0, len(damaged) - 1))] = data.draw(st.integers(0, 255))
    for candidate in (staged, bytes(damaged), memoryview(bytes(damaged))):
        made = records.accelerated_staged(candidate, "orders", "/")
        if made is not None:
            assert made == python_staged(candidate)


@needs_c
def test_the_c_staged_reader_writes_the_common_shapes_and_leaves_the_odd_ones_to_python():
    table = struct.pack(">I", 30) + b"\x10x-delivery-count" + b"l" + struct.pack(">q", 2) + b"\x01n" + b"t\x01"
    plain = staged_record(b"ex", b"rk", struct.pack(">H", 0x8000 | 0x1000) + b"\x04text\x02", b"hi", 5, 7, True, 1)
    with_headers = staged_record(b"ex", b"rk", struct.pack(">H", 0x8000 | 0x2000 | 0x1000) + b"\x04text" + table + b"\x02",
                                 b"hi", 5, 7, True, 1)
    not_utf8_property = staged_record(b"ex", b"rk", struct.pack(">H", 0x8000) + b"\x02\xff\xfe", b"", 5, 7, False, 0)
    table_too_long = staged_record(b"ex", b"rk", struct.pack(">H", 0x2000) + struct.pack(">I", 99), b"", 5, 7, False, 0)
    not_utf8_exchange = staged_record(b"\xff", b"rk", struct.pack(">H", 0), b"", 5, 7, False, 0)

    for made in (plain, with_headers, not_utf8_property):
        assert records.accelerated_staged(made, "orders", "/") == read_staged_here(made, "orders", "/")
    assert b'"headers":[["n",{"Bool":true}]]' in records.accelerated_staged(with_headers, "orders", "/")[0]
    # The Python reader names these defects.
    assert records.accelerated_staged(table_too_long, "orders", "/") is None
    assert records.accelerated_staged(not_utf8_exchange, "orders", "/") is None


def _may_select(record: BackupRecord, needle: bytes, since: int, until: int, key_text: str, name: str,
                text: str | None) -> bool:
    """What select_records must keep, said in Python: a record a filter with these conditions may select."""
    return (since <= record.backed_up_at <= until and needle in record.body and key_text in record.routing_key
            and (not name or any(k == name and (text is None or not isinstance(v.value, str) or v.value == text)
                                 for k, v in record.headers)))


@needs_c
@MANY
@given(batch=st.lists(any_records, max_size=8), data=st.data())
def test_select_records_builds_exactly_the_records_a_filter_may_select(batch, data):
    payload = b"".join(struct.pack("<I", len(raw)) + raw for raw in map(encode_record, batch))
    read, _ = records.accelerated_read(payload, 0, 100)
    picked = data.draw(st.sampled_from(batch)) if batch else BackupRecord(body=b"")
    needle = data.draw(st.sampled_from([b"", picked.body[:3], b"\x00\xff"]))
    stamps = sorted(data.draw(st.sampled_from([picked.backed_up_at, -(2**63), 2**63 - 1])) for _ in range(2))
    key_text = data.draw(st.sampled_from(["", picked.routing_key[1:4], "zz"]))
    header = data.draw(st.sampled_from([("", None), *[(k, v.value if isinstance(v.value, str) else None)
                                                      for k, v in picked.headers[:2]], ("x-absent", "a")]))
    conditions = (needle, stamps[0], stamps[1], key_text, *header)

    pairs, after, count = records.accelerated_select(payload, 0, 100, *conditions)

    assert count == len(read) and (after == len(payload) or count < len(batch))
    assert pairs == [(i, r) for i, r in enumerate(read) if _may_select(r, *conditions)]
