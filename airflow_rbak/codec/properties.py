"""The AMQP 0-9-1 basic properties a record keeps: the one table the record JSON, pika and the C accelerator follow.

``headers``, the fourteenth basic property, is not here: a record keeps it
beside the properties, typed (``codec.headers``). Everything that lists the
properties takes them from :data:`PROPERTIES`: ``BackupProperties`` and its
JSON (``records.py``, which checks its fields against this table on import),
the pika conversions (``broker/amqp_types.py``), the property list's decoder
(``property_list.py``), the publish fast path (``restore/wire.py``) and the C
reader and writer (``_speedups``, given the table by ``records.py`` on import).
"""

from __future__ import annotations

from dataclasses import dataclass

#: Property types: an AMQP short string (text in the record), an octet (0-255), a timestamp (an integer).
SHORT_STRING = "shortstr"
OCTET = "octet"
TIMESTAMP = "timestamp"


@dataclass(frozen=True)
class MessageProperty:
    """One basic property: its AMQP name, its key in the record JSON, its pika attribute and its type."""

    name: str
    json_name: str
    pika_name: str
    kind: str


def _p(name: str, kind: str = SHORT_STRING, json_name: str | None = None) -> MessageProperty:
    return MessageProperty(name, json_name or name, name, kind)


#: In the spec's order, which is also their order on the wire (where ``headers`` comes third).
PROPERTIES = (
    _p("content_type"),
    _p("content_encoding"),
    _p("delivery_mode", OCTET),
    _p("priority", OCTET),
    _p("correlation_id"),
    _p("reply_to"),
    _p("expiration"),
    _p("message_id"),
    _p("timestamp", TIMESTAMP),
    _p("type", json_name="type_field"),  # the spec's Rust struct cannot name a field ``type``
    _p("user_id"),
    _p("app_id"),
    _p("cluster_id"),
)
#: The record JSON's keys (and ``BackupProperties``' fields), in order.
PROPERTY_NAMES = tuple(p.json_name for p in PROPERTIES)
#: pika's ``BasicProperties`` attributes, in the same order.
PIKA_NAMES = tuple(p.pika_name for p in PROPERTIES)
#: The record JSON's keys of the properties that are numbers (octets and the timestamp); the rest are text.
NUMBER_NAMES = frozenset(p.json_name for p in PROPERTIES if p.kind != SHORT_STRING)
