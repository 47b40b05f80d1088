"""A delivered message's record JSON, built straight from pika's objects: the capture's per-message path.

The bytes are exactly ``encode_record`` of the delivery's BackupRecord
(``tests/capture/test_delivery_json.py`` holds them equal, over generated
messages, to a typed reference in ``tests/broker/record_reference.py``),
without a BackupRecord and a BackupProperties built and read back for every
message: at 1 KiB messages that round trip cost as much as pika's own
decoding of the delivery.
"""

from __future__ import annotations

import operator
from collections.abc import Sequence
from typing import Any

from pika import spec

from airflow_rbak.broker.amqp_types import headers_of, property_text
from airflow_rbak.codec.properties import NUMBER_NAMES, PIKA_NAMES, PROPERTY_NAMES
from airflow_rbak.codec.records import encode_record_object, record_object

_PIKA_VALUES = operator.attrgetter(*PIKA_NAMES)


def properties_json(props: spec.BasicProperties) -> dict[str, Any]:
    """The spec's properties object for delivered properties (as ``BackupProperties.to_json()`` writes it)."""
    values: Sequence[Any] = _PIKA_VALUES(props)
    if bytes in map(type, values):  # a short string that was not UTF-8: rare, so checked once for all
        values = [v if name in NUMBER_NAMES else property_text(v) for name, v in zip(PROPERTY_NAMES, values)]
    return dict(zip(PROPERTY_NAMES, values))


def delivery_record_json(
    method: spec.Basic.Deliver,
    props: spec.BasicProperties,
    body: bytes,
    *,
    queue: str,
    vhost: str,
    backed_up_at: int,
    drop_headers: frozenset[str] = frozenset(),
    delivery_tag: int | None = None,
) -> bytes:
    """The record JSON of one delivery; ``drop_headers`` removes broker-owned headers, ``delivery_tag``
    replaces the delivery's own (a stream's records carry the offset)."""
    headers = [[key, value.to_json()] for key, value in headers_of(props) if key not in drop_headers]
    return encode_record_object(
        record_object(
            body, properties_json(props), headers, method.exchange, method.routing_key,
            method.delivery_tag if delivery_tag is None else delivery_tag, bool(method.redelivered), backed_up_at, queue, vhost,
        )
    )
