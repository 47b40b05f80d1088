"""A record that names a key twice in any of its objects is damaged: every reader refuses it, none picks one.

orjson keeps the last of two equal keys and the C reader would keep the first, so a repeated key could make the
record the plan verified differ from the record the restore publishes. Records here are built by hand.
"""

from __future__ import annotations

import orjson
import pytest

from airflow_rbak.codec import BackupRecord, Compression, RecordDecodeError, decode_record, encode_record
from airflow_rbak.codec.bounded_json import RepeatedKeyError, loads_unique
from airflow_rbak.codec.headers import HeaderValue as H
from airflow_rbak.codec.record_summary import summarize_payload
from airflow_rbak.codec.records import RecordError
from airflow_rbak.codec.segment import _LEN, decode_payload, decode_segment, encode_payload

_GOOD = encode_record(BackupRecord(
    body=b"verified", headers=(("n", H.long(1)), ("t", H.table([("k", H.double(1.5))]))), exchange="x",
    routing_key="rk", delivery_tag=3, backed_up_at=7, source_queue="orders", source_vhost="/"))

#: (what is repeated, the record with it): each is valid JSON that orjson reads as one record.
PLANTED = {
    "body, last": _GOOD[:-1] + b',"body":[101,118,105,108]}',
    "body, spelled with an escape": _GOOD[:-1] + b',"bod\\u0079":null}',
    "exchange": _GOOD.replace(b'"exchange":"x"', b'"exchange":"x","exchange":"elsewhere"'),
    "routing_key, first": _GOOD.replace(b'{"body"', b'{"routing_key":"other","body"'),
    "a property": _GOOD.replace(b'"app_id":null', b'"app_id":null,"app_id":"evil"'),
    "a header value's variant": _GOOD.replace(b'{"Long":1}', b'{"Long":1,"Long":2}'),
    "a value inside a table header": _GOOD.replace(b'{"Double":1.5}', b'{"Double":1.5,"Double":9.5}'),
}


def _segment(*records: bytes) -> bytes:
    payload = b"".join(_LEN.pack(len(r)) + r for r in records)
    return encode_payload(payload, len(records), 7, 7, Compression.NONE).data


def test_the_hand_built_record_without_repeats_reads():
    assert decode_record(_GOOD).body == b"verified"


@pytest.mark.parametrize("planted", PLANTED.values(), ids=PLANTED.keys())
def test_decode_record_refuses_a_repeated_key_as_damaged(planted):
    with pytest.raises(RecordError, match="more than once"):
        decode_record(planted)


@pytest.mark.parametrize("planted", PLANTED.values(), ids=PLANTED.keys())
def test_a_segment_with_one_such_record_is_refused_by_the_reader_and_by_the_deep_check(planted):
    data = _segment(_GOOD, planted, _GOOD)

    with pytest.raises(RecordDecodeError, match="record 1: .*more than once"):
        decode_segment(data, name="s.rbak")
    header, _ = decode_payload(data, "s.rbak", 1024**2)
    with pytest.raises(RecordDecodeError, match="more than once"):
        summarize_payload(data, header, "s.rbak", 1024**2, None, "/", "orders")


@pytest.mark.parametrize("text", [
    b'{"a":1,"a":2}', b'[1,{"a":1,"a":2}]', b'["s",{"a":1,"a":2}]', b'{"x":"12:00","a":1,"a":2}',
    b'{"a":{"b":1},"c":[{"d":1,"d":1}]}', b'{"a" : 1, "a":2}', b'{"b\\u006f":1,"bo":2}', b'[[[{"k":[],"k":{}}]]]',
])
def test_loads_unique_finds_a_repeat_wherever_it_is(text):
    with pytest.raises(RepeatedKeyError):
        loads_unique(text)


@pytest.mark.parametrize("text", [b'{"x":"12:00","a":[1,2],"b":{"c":null}}', b'[{"a":1},{"a":2}]', b'{"a":{"a":1}}',
                                  b'{"a:b":1,"c":"d:e"}', b'[]', b'"a:b"', b'{"a":[1,{"b":1,"c":2}]}'])
def test_loads_unique_reads_what_repeats_no_key_as_orjson_does(text):
    assert loads_unique(text) == orjson.loads(text)
