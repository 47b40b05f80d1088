"""The JSON a record must have, built from the spec's tables rather than from the codec."""

from __future__ import annotations

import math

PROPERTY_ORDER = (
    "content_type", "content_encoding", "delivery_mode", "priority", "correlation_id", "reply_to", "expiration",
    "message_id", "timestamp", "type_field", "user_id", "app_id", "cluster_id",
)
RECORD_ORDER = (
    "body", "properties", "headers", "exchange", "routing_key", "delivery_tag", "redelivered", "backed_up_at",
    "source_queue", "source_vhost",
)


def header_value_json(value) -> object:
    kind, inner = value.kind, value.value
    if kind == "Void":
        return "Void"
    if kind == "Bytes":
        return {"Bytes": list(inner)}
    if kind == "Table":
        return {"Table": [[k, header_value_json(v)] for k, v in inner]}
    if kind == "Array":
        return {"Array": [header_value_json(v) for v in inner]}
    if kind in ("Float", "Double") and not math.isfinite(inner):
        return {kind: None}
    return {kind: inner}


def expected_record_json(record) -> dict:
    """The spec's JSON object for ``record``, keys in the spec's order."""
    props = {name: getattr(record.properties, name) for name in PROPERTY_ORDER}
    return {
        "body": list(record.body) if record.body else None,
        "properties": props,
        "headers": [[k, header_value_json(v)] for k, v in record.headers],
        "exchange": record.exchange,
        "routing_key": record.routing_key,
        "delivery_tag": record.delivery_tag,
        "redelivered": record.redelivered,
        "backed_up_at": record.backed_up_at,
        "source_queue": record.source_queue,
        "source_vhost": record.source_vhost,
    }
