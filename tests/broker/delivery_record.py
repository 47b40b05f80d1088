"""The typed reference for the capture's record JSON: a delivery as a BackupRecord, built field by field.

The capture writes each delivery's record JSON straight from pika's objects
(``capture/delivery_json.py``); ``tests/capture/test_delivery_json.py`` holds
its bytes equal to ``encode_record`` of the record built here, a second way
that shares none of that fast path's code.
"""

from __future__ import annotations

import operator

from pika import spec

from airflow_rbak.broker.amqp_types import headers_of, property_text
from airflow_rbak.codec.properties import PIKA_NAMES, PROPERTIES, SHORT_STRING
from airflow_rbak.codec.records import BackupProperties, BackupRecord

_PIKA_VALUES = operator.attrgetter(*PIKA_NAMES)


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
