"""The properties table is the only list of message properties: the record, its JSON and the C accelerator follow it."""

from __future__ import annotations

from dataclasses import fields

import orjson
import pytest

from airflow_rbak.codec import BackupProperties, BackupRecord, decode_record, encode_record, records
from airflow_rbak.codec.properties import NUMBER_NAMES, PROPERTIES, PROPERTY_NAMES, SHORT_STRING

needs_c = pytest.mark.skipif(records._speedups is None, reason="the C accelerator is not built")


def test_backup_properties_has_the_tables_fields_in_its_order():
    assert tuple(f.name for f in fields(BackupProperties)) == PROPERTY_NAMES


def test_the_record_json_lists_the_tables_properties_in_its_order():
    values = {name: 1 if name in NUMBER_NAMES else name for name in PROPERTY_NAMES}
    record = BackupRecord(body=b"x", properties=BackupProperties(**values))

    written = orjson.loads(encode_record(record))["properties"]

    assert tuple(written) == PROPERTY_NAMES
    assert written == values
    assert decode_record(encode_record(record)) == record


@needs_c
def test_the_c_accelerator_holds_the_tables_properties_and_kinds():
    assert records._speedups.properties() == tuple((p.json_name, p.kind) for p in PROPERTIES)


def test_the_thirteen_basic_properties_without_headers():
    assert len(PROPERTIES) == 13 and "headers" not in PROPERTY_NAMES
    assert {p.kind for p in PROPERTIES} == {SHORT_STRING, "octet", "timestamp"}
