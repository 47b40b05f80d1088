"""The C body reader and writer are accelerators only: they must agree with the generic paths on everything."""

from __future__ import annotations

import numpy
import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from airflow_rbak.codec import records
from airflow_rbak.codec.records import RecordError, decode_record, encode_record, record_from_json
from tests.codec.strategies import records as any_records

# Everything after the body of a minimal record: `{"body":[120],` is 14 characters.
TAIL = encode_record(records.BackupRecord(body=b"x")).decode()[14:]


def test_the_accelerator_is_built_here():
    assert records.parse_byte_array is not None, "setup.py's C extension did not build; the codec runs slower"
    assert records.format_byte_array is not None, "the C extension was built from an older source: reinstall"


@settings(max_examples=200, deadline=None)
@given(body=st.one_of(st.binary(max_size=2000), st.sampled_from([b"\x00", bytes(range(256)), b"\xff" * 70_000])))
def test_the_c_body_writer_writes_what_orjson_writes_from_a_uint8_array(body):
    assert records.format_byte_array(body) == orjson.dumps(numpy.frombuffer(body, numpy.uint8), option=orjson.OPT_SERIALIZE_NUMPY)


@settings(max_examples=50, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(record=any_records)
def test_records_are_written_byte_for_byte_the_same_without_the_accelerator(record):
    fast = encode_record(record)
    saved = records.format_byte_array
    records.format_byte_array = None
    try:
        assert encode_record(record) == fast
    finally:
        records.format_byte_array = saved


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(record=any_records)
def test_the_fast_path_and_the_generic_path_read_the_same_record(record):
    raw = encode_record(record)

    fast = records._decode_body_first(raw) if raw.startswith(b'{"body":[') else decode_record(raw)

    assert fast == record_from_json(orjson.loads(raw)) == record


@given(body=st.binary(max_size=300), spaces=st.sampled_from(["", " ", "\n\t"]))
def test_json_whitespace_inside_the_body_array_is_accepted(body, spaces):
    values = f",{spaces}".join(str(b) for b in body)
    raw = ('{"body":[' + spaces + values + spaces + "]," + TAIL).encode()

    assert decode_record(raw).body == body


def test_the_hand_built_record_tail_is_valid():
    assert decode_record(('{"body":[7,255],' + TAIL).encode()).body == b"\x07\xff"


@pytest.mark.parametrize("array", ["[256]", "[01]", "[1,,2]", "[-1]", "[1.0]", "[1,]", "[1", '["1"]', "[1 2]", "[1000]"])
def test_malformed_body_arrays_are_refused_on_both_paths(array, monkeypatch):
    raw = ('{"body":' + array + "," + TAIL).encode()

    with pytest.raises(RecordError):
        decode_record(raw)
    monkeypatch.setattr(records, "parse_byte_array", None)
    with pytest.raises(RecordError):
        decode_record(raw)


@settings(max_examples=50, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(record=any_records)
def test_without_the_accelerator_records_still_round_trip(record):
    saved = records.parse_byte_array
    records.parse_byte_array = None
    try:
        assert decode_record(encode_record(record)) == record
    finally:
        records.parse_byte_array = saved
