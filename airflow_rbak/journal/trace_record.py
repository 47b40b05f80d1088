"""A firehose trace message as the record of the publish it traces, or as a clock mark.

The trace carries the publish in its headers (``exchange_name``, ``routing_keys``: the routing key, then the CC and
BCC keys, ``properties``: the original properties by name, their ``headers`` the original table with CC but without
BCC) and its body is the original body. The record keeps what routes the message again: its exchange, first routing
key, properties, and headers with a ``BCC`` header added for the keys the broker removed, so the target's own
routing is the same. Header types come from the wire (``codec/field_table.py`` decoded the trace's table).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from airflow_rbak.broker.journal import CLOCK_EXCHANGE, CLOCK_HEADER, START_HEADER
from airflow_rbak.codec import BackupRecord
from airflow_rbak.codec.field_table import plain_value
from airflow_rbak.codec.headers import BOOL, HeaderValue
from airflow_rbak.codec.journal_layout import JOURNAL_QUEUE
from airflow_rbak.codec.properties import PROPERTIES
from airflow_rbak.codec.records import BackupProperties, RecordError
from airflow_rbak.exceptions import RbakError

HeaderTable = tuple[tuple[str, HeaderValue], ...]
#: The trace's property names (RabbitMQ's, ``type`` among them) -> the record's.
_RECORD_NAMES = {p.name: p.json_name for p in PROPERTIES}


class TraceMessageError(RbakError, ValueError):
    """A message in the journal is not a firehose trace of a publish (it was published into the journal itself)."""


@dataclass(frozen=True)
class Trace:
    """What a trace message says of one publish."""

    exchange: str
    routing_keys: tuple[str, ...]
    properties: BackupProperties
    headers: HeaderTable
    body: bytes
    #: The queues the publish reached (``routed_queues``); None when the trace does not say.
    routed_queues: tuple[str, ...] | None = None

    @property
    def went_nowhere(self) -> bool:
        """True when the source routed the publish to no queue: replaying it would reach none either, so the
        archiver counts it instead of keeping it (a recovery would otherwise publish it unroutable). The default
        exchange's trace names the queue of its routing key even when no such queue exists (3.10.8, 4.3.6): such a
        publish is kept, and a recovery finds it unroutable as the source did."""
        return self.routed_queues == () and self.exchange != CLOCK_EXCHANGE

    @property
    def clock_ms(self) -> int | None:
        """The clock mark's time (epoch ms) when this is the archiver's clock mark, else None."""
        if self.exchange != CLOCK_EXCHANGE:
            return None
        value = next((v for k, v in self.headers if k == CLOCK_HEADER), None)
        return value.value if value is not None and value.kind == "Long" else None

    @property
    def starts(self) -> bool:
        """True for the start mark of an ``enable`` that found the journal off: what came before may be missing."""
        return self.clock_ms is not None and any(k == START_HEADER and v.kind == BOOL and v.value is True
                                                 for k, v in self.headers)

    def record(self, vhost: str, delivery_tag: int, redelivered: bool, backed_up_at: int) -> BackupRecord:
        """The record that publishes this message again to the same queues (routing key, CC and BCC)."""
        headers = self.headers
        cc = next((v for k, v in headers if k == "CC"), None)
        named = 1 + (sum(1 for x in cc.value if x.kind == "LongString") if cc is not None and cc.kind == "Array" else 0)
        bcc = self.routing_keys[named:]
        if bcc:
            headers = (*headers, ("BCC", HeaderValue.array([HeaderValue.long_string(k) for k in bcc])))
        return BackupRecord(body=self.body, properties=self.properties, headers=headers, exchange=self.exchange,
                            routing_key=self.routing_keys[0] if self.routing_keys else "", delivery_tag=delivery_tag,
                            redelivered=redelivered, backed_up_at=backed_up_at, source_queue=JOURNAL_QUEUE,
                            source_vhost=vhost)


def read_trace(trace_headers: HeaderTable, body: bytes) -> Trace:
    """The publish a trace message describes; :class:`TraceMessageError` when it is not a trace."""
    fields = dict(trace_headers)
    exchange, keys, props = fields.get("exchange_name"), fields.get("routing_keys"), fields.get("properties")
    if exchange is None or keys is None or props is None or exchange.kind != "LongString" or keys.kind != "Array" \
            or props.kind != "Table":
        raise TraceMessageError("a message in the journal has no exchange_name, routing_keys or properties: it was not "
                                "published by the firehose")
    values: dict[str, Any] = {}
    headers: HeaderTable = ()
    for name, value in props.value:
        if name == "headers":
            headers = value.value if value.kind == "Table" else ()
        elif name in _RECORD_NAMES:
            plain = plain_value(value)
            values[_RECORD_NAMES[name]] = plain.decode("utf-8", "replace") if isinstance(plain, bytes) else plain
    try:
        properties = BackupProperties.from_json(values)
    except RecordError as exc:
        raise TraceMessageError(f"a trace message's properties: {exc}") from None
    routing_keys = tuple(str(plain_value(k)) for k in keys.value)
    routed = fields.get("routed_queues")
    routed_queues = tuple(str(plain_value(q)) for q in routed.value) if routed is not None and routed.kind == "Array" \
        else None
    return Trace(exchange.value, routing_keys, properties, headers, body, routed_queues)
