"""Typed references for the fast paths: a delivery as a BackupRecord, and a record as pika properties, field by field.

Encode reads each staged delivery straight into its record JSON
(``codec/staged_records.py``) and the restore writes each record's content
header straight from its JSON form (``restore/wire.py``). The tests hold both
equal to what is built here (``tests/capture/test_staged_delivery.py``,
``tests/restore/test_wire.py``), a second way that shares none of their JSON code.
"""

from __future__ import annotations

import operator

from pika import spec

from airflow_rbak.broker.amqp_types import TypedBasicProperties, headers_of
from airflow_rbak.codec.properties import PIKA_NAMES, PROPERTIES, PROPERTY_NAMES, SHORT_STRING
from airflow_rbak.codec.records import BackupProperties, BackupRecord

_PIKA_VALUES = operator.attrgetter(*PIKA_NAMES)
_RECORD_VALUES = operator.attrgetter(*PROPERTY_NAMES)


def property_text(value: str | bytes | None) -> str | None:
    """A short-string property as text (pika gives ``bytes`` when it is not UTF-8; a record holds text)."""
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else value


def properties_to_backup(props: spec.BasicProperties) -> BackupProperties:
    """The spec's BackupProperties from pika's properties (``type`` becomes ``type_field``)."""
    return BackupProperties(**{
        p.json_name: property_text(value) if p.kind == SHORT_STRING else value
        for p, value in zip(PROPERTIES, _PIKA_VALUES(props))
    })


def record_from_delivery(
    method: spec.Basic.Deliver,
    props: spec.BasicProperties,
    body: bytes,
    *,
    queue: str,
    vhost: str,
    backed_up_at: int,
    drop_headers: frozenset[str] = frozenset(),
    delivery_tag: int | None = None,
) -> BackupRecord:
    """Build the BackupRecord of one delivery; ``drop_headers`` removes broker-owned headers."""
    headers = headers_of(props)
    if drop_headers and headers:
        headers = tuple(p for p in headers if p[0] not in drop_headers)
    return BackupRecord(
        body=bytes(body),
        properties=properties_to_backup(props),
        headers=headers,
        exchange=method.exchange,
        routing_key=method.routing_key,
        delivery_tag=method.delivery_tag if delivery_tag is None else delivery_tag,
        redelivered=bool(method.redelivered),
        backed_up_at=backed_up_at,
        source_queue=queue,
        source_vhost=vhost,
    )


def properties_from_record(record: BackupRecord) -> TypedBasicProperties:
    """Properties to republish a record with (the restore's fast path writes the same bytes): typed headers, same wire types."""
    return TypedBasicProperties(
        **dict(zip(PIKA_NAMES, _RECORD_VALUES(record.properties))),
        typed_headers=record.headers if record.headers else None,
    )
