"""The messages of the compatibility backup, and the plain JSON a consumer's view of one is compared in.

Both the script that wrote the checked-in backup (``scripts/make_compat_backup.py``) and the test that restores it
(``tests/compat/test_compat_backup.py``) use this module; the JSON form is this module's own (``[name, kind,
value]``, bytes as hex), not the codec's, so a later change of the record format cannot change what is expected.

The stream's messages carry only what every supported RabbitMQ delivers from a stream unchanged (no table, array,
byte-array or decimal header, no ``cluster_id``); headers are published in key order, the order a 3.10 stream and a
quorum queue that counted a delivery hand them out; every quorum message has the same priority (a 4.x quorum queue
delivers by priority).
"""

from __future__ import annotations

from typing import Any

from airflow_rbak.broker import amqp_types
from airflow_rbak.codec.field_table import decimal_value
from airflow_rbak.codec.headers import HeaderValue as H
from airflow_rbak.codec.properties import PIKA_NAMES

#: The source vhost the backup was written from, and its queues: name -> type.
SOURCE_VHOST = "rbak-compat"
QUEUES = {"orders": "classic", "payments": "quorum", "events": "stream"}
#: The two backups: the first full, the second's stream continues the first's segments (a chain).
FULL, INCREMENTAL = "compat-full", "compat-incremental"
#: Messages published before the first backup, and (the stream's only) between the two.
FIRST = {"orders": 6, "payments": 5, "events": 4}
SECOND = {"events": 3}


def body(queue: str, i: int) -> bytes:
    """A body holding every byte value somewhere across the messages; one is empty."""
    if queue == "orders" and i == 3:
        return b""
    head = f"{queue}-{i}:".encode()
    return head + bytes((i * 37 + k) % 256 for k in range(40 + 13 * i))


def properties(queue: str, i: int) -> amqp_types.TypedBasicProperties:
    """Every basic property set (the stream's without ``cluster_id``), and headers of many wire types, in key order."""
    headers: list[tuple[str, H]] = [("a-name", H.long_string(f"é-{queue}-{i}")), ("b-seq", H.long(i)),
                                    ("c-ok", H.bool_(i % 2 == 0)), ("d-when", H.timestamp(1_700_000_000 + i)),
                                    ("e-ratio", H.double(i / 4)), ("f-small", H.short(i)), ("g-none", H.void())]
    if queue != "events":
        headers += [("h-blob", H.bytes_(bytes([i, 0, 255]))), ("i-price", decimal_value(2, 1000 + i)),
                    ("j-nested", H.table([("list", H.array([H.long(i), H.void(), H.long_string("x")]))]))]
    return amqp_types.TypedBasicProperties(
        content_type="application/octet-stream", content_encoding="identity", delivery_mode=2 if i % 3 else 1,
        priority=4 if queue == "payments" else i % 10, correlation_id=f"c-{i}", reply_to="replies",
        expiration="86400000", message_id=f"{queue}-{i}", timestamp=1_700_000_000 + i, type="compat.event",
        user_id="guest", app_id="rbak-compat", cluster_id=None if queue == "events" else "c1", typed_headers=tuple(headers))


def value_json(value: H) -> Any:
    """A header value as plain JSON: ``[kind, value]``, bytes as hex, tables and arrays nested."""
    if value.kind == "Table":
        return ["Table", [[k, value_json(v)] for k, v in value.value]]
    if value.kind == "Array":
        return ["Array", [value_json(v) for v in value.value]]
    if isinstance(value.value, (bytes, bytearray)):
        return [value.kind, {"hex": bytes(value.value).hex()}]
    return [value.kind, value.value]


def view_json(body_bytes: bytes, props: Any, headers: Any) -> dict[str, Any]:
    """Everything a consumer sees of a message but the broker's own headers, as plain JSON."""
    return {"body_hex": bytes(body_bytes).hex(),
            "properties": {name: getattr(props, name) for name in PIKA_NAMES},
            "headers": [[k, value_json(v)] for k, v in headers]}


def published_json(queue: str, i: int) -> dict[str, Any]:
    """Message ``i`` of a queue as it was published."""
    props = properties(queue, i)
    return view_json(body(queue, i), props, props.typed_headers)
