"""A vhost's journal on the broker: the firehose into a quorum queue, turned on, off and checked on every node.

The firehose (``amq.rabbitmq.trace``) publishes one trace message per publish into the vhost, with the original
exchange, routing keys, properties, headers and body (docs/operations.md, "Continuous capture"). A stream bound to
it would lose the properties, so the journal is a quorum queue. Its length limit overflows by ``drop-head``: a full
journal drops its oldest trace messages, never the users' messages, and stays bounded. ``reject-publish`` would
not bound it: the firehose's enqueues are not confirmed, and a quorum queue refuses only confirmed publishes over
its limit (``versions.JOURNAL_OVERFLOW``).

Tracing is a setting of each node, lost when a node restarts (``versions.JOURNAL_TRACING``), so it is set and read
through every node's own management endpoint the connection lists, never through one node for all. Setting it is a
``PUT`` of the vhost that would reset the fields it does not name (description and tags on 3.10), so the vhost's
own fields are sent back as they were.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote

import requests

from airflow_rbak.broker.amqp_types import TypedBasicProperties
from airflow_rbak.broker.connection import RabbitMQConnection
from airflow_rbak.broker.errors import BrokerApiError, BrokerError
from airflow_rbak.broker.management import ManagementClient, addressable
from airflow_rbak.broker.management_admin import send
from airflow_rbak.broker.pika_connection import blocking_connection
from airflow_rbak.codec.headers import HeaderValue
from airflow_rbak.codec.journal_layout import JOURNAL_QUEUE

CLOCK_EXCHANGE = "rbak.journal.clock"
#: The clock mark's header: epoch milliseconds (a Long), the lower bound of the publish time of what follows it.
CLOCK_HEADER = "rbak-journal-clock"
#: On the first mark of an ``enable`` that found the journal not fully on (queue missing, unbound, or tracing not on on
#: every node): publishes before it may be missing, so the archiver records a gap up to it.
START_HEADER = "rbak-journal-start"
TRACE_EXCHANGE = "amq.rabbitmq.trace"
TRACE_BINDING = "publish.#"
DEFAULT_MAX_MESSAGES = 5_000_000
#: Connection protocols whose publishes go through an AMQP 0-9-1 channel, which the firehose traces.
COVERED_PROTOCOLS = ("AMQP 0-9-1", "Direct 0-9-1")


class JournalError(BrokerError):
    """The journal cannot be turned on, off or read (a vhost the API cannot name, or a journal another run drains)."""


@dataclass(frozen=True)
class NodeTracing:
    """Tracing of the vhost on one node: ``on``, ``off``, ``unreachable`` (a node the connection lists but cannot
    reach) or ``unverified`` (a running node of the cluster that the connection does not list)."""

    node: str
    state: str
    endpoint: str | None = None


@dataclass(frozen=True)
class JournalStatus:
    """What the broker holds of a vhost's journal, and what it does not cover."""

    vhost: str
    nodes: list[NodeTracing]
    queue_exists: bool
    bound: bool
    depth: int
    max_length: int | None
    uncovered: list[str] = field(default_factory=list)

    @property
    def full(self) -> bool:
        return self.max_length is not None and self.depth >= self.max_length

    @property
    def tracing_everywhere(self) -> bool:
        return all(n.state == "on" for n in self.nodes)

    def to_json(self) -> dict[str, Any]:
        return {"vhost": self.vhost, "nodes": {n.node: n.state for n in self.nodes}, "queue_exists": self.queue_exists,
                "bound": self.bound, "depth": self.depth, "max_length": self.max_length, "full": self.full,
                "uncovered": list(self.uncovered)}


def _path(vhost: str) -> str:
    if not addressable(vhost):
        raise JournalError(f"vhost {vhost!r} cannot be named in a management API URL; it cannot be journaled")
    return quote(vhost, safe="")


def vhost_fields(client: ManagementClient, vhost: str) -> dict[str, Any]:
    """The fields a ``PUT`` of the vhost must send back to keep them: description, tags, default queue type."""
    info = client.get(f"vhosts/{_path(vhost)}")
    meta = info.get("metadata") or {}
    kept: dict[str, Any] = {"description": str(meta.get("description", info.get("description")) or "")}
    tags = meta.get("tags", info.get("tags")) or []
    kept["tags"] = ",".join(str(t) for t in tags) if isinstance(tags, list) else str(tags)
    queue_type = meta.get("default_queue_type", info.get("default_queue_type"))
    if isinstance(queue_type, str) and queue_type not in ("", "undefined"):
        kept["default_queue_type"] = queue_type
    return kept


def _node_clients(connection: RabbitMQConnection) -> list[tuple[str, RabbitMQConnection]]:
    """Each node the connection lists, by its management endpoint, with a connection to it alone."""
    return [(one.management_base_url, one) for one in connection.each_node()]


def set_tracing(connection: RabbitMQConnection, vhost: str, on: bool) -> list[NodeTracing]:
    """Turn the vhost's tracing on or off on every node the connection lists, through each node's own endpoint,
    keeping the vhost's fields; a node that cannot be reached is named ``unreachable``, never skipped silently."""
    done = []
    for endpoint, one in _node_clients(connection):
        try:
            with ManagementClient(one) as client:
                body = {**vhost_fields(client, vhost), "tracing": on}
                send(client, "PUT", f"vhosts/{_path(vhost)}", body)
                node = str(client.overview().get("node", endpoint))
        except (BrokerError, requests.RequestException) as exc:
            if isinstance(exc, JournalError):
                raise
            done.append(NodeTracing(endpoint, "unreachable", endpoint))
            continue
        done.append(NodeTracing(node, "on" if on else "off", endpoint))
    return done


def node_tracing(connection: RabbitMQConnection, vhost: str) -> list[NodeTracing]:
    """The vhost's tracing as each node reports it; running nodes the connection does not list are ``unverified``."""
    found: list[NodeTracing] = []
    running: list[str] = []
    for endpoint, one in _node_clients(connection):
        try:
            with ManagementClient(one) as client:
                info = client.get(f"vhosts/{_path(vhost)}")
                node = str(client.overview().get("node", endpoint))
                if not running:
                    running = [str(n.get("name")) for n in client.get("nodes") if n.get("running")]
        except BrokerError as exc:
            if isinstance(exc, JournalError) or (isinstance(exc, BrokerApiError) and exc.status == 404):
                raise
            found.append(NodeTracing(endpoint, "unreachable", endpoint))
            continue
        found.append(NodeTracing(node, "on" if info.get("tracing") else "off", endpoint))
    listed = {n.node for n in found}
    found += [NodeTracing(name, "unverified") for name in running if name not in listed]
    return found


def enable(connection: RabbitMQConnection, vhost: str, max_messages: int = DEFAULT_MAX_MESSAGES) -> JournalStatus:
    """Journal the vhost: the journal queue, its binding and the clock exchange declared, tracing on on every node,
    and a first clock mark. When the journal was not fully on before, that mark is a start mark (:data:`START_HEADER`):
    whatever was published while it was off is missing, and the next archive names that time as a gap. Running it
    again on a journal that is fully on publishes an ordinary mark and records no gap."""
    if not isinstance(max_messages, int) or max_messages < 1:
        raise JournalError(f"journal_max_messages must be a positive integer, not {max_messages!r}")
    _path(vhost)
    before = status(connection, vhost)
    started = not (before.queue_exists and before.bound and before.tracing_everywhere)
    conn = blocking_connection(connection.pika_parameters_all(vhost))
    try:
        channel = conn.channel()
        channel.queue_declare(JOURNAL_QUEUE, durable=True, arguments=journal_arguments(max_messages))
        channel.queue_bind(JOURNAL_QUEUE, TRACE_EXCHANGE, TRACE_BINDING)
        channel.exchange_declare(CLOCK_EXCHANGE, "fanout", durable=True)
        set_tracing(connection, vhost, True)
        publish_mark(channel, start=started)
    finally:
        _close(conn)
    return status(connection, vhost)


def journal_arguments(max_messages: int) -> dict[str, Any]:
    """The journal queue's arguments: a quorum queue that drops its oldest trace messages when full."""
    return {"x-queue-type": "quorum", "x-max-length": max_messages, "x-overflow": "drop-head"}


def disable(connection: RabbitMQConnection, vhost: str, delete_queue: bool = False) -> list[NodeTracing]:
    """Stop journaling the vhost: tracing off on every node and the binding removed. The journal queue stays unless
    ``delete_queue``: it may hold messages no archive holds yet."""
    nodes = set_tracing(connection, vhost, False)
    conn = blocking_connection(connection.pika_parameters_all(vhost))
    try:
        channel = conn.channel()
        if _queue_info(connection, vhost) is not None:
            channel.queue_unbind(JOURNAL_QUEUE, TRACE_EXCHANGE, TRACE_BINDING)
            if delete_queue:
                channel.queue_delete(JOURNAL_QUEUE)
    finally:
        _close(conn)
    return nodes


def publish_mark(channel: Any, at_ms: int | None = None, *, start: bool = False) -> int:
    """Publish one clock mark (the firehose journals it in line with every other publish); returns its time.
    ``start``: the journal has just been turned (back) on (:data:`START_HEADER`)."""
    at_ms = int(time.time() * 1000) if at_ms is None else at_ms
    headers: tuple[tuple[str, HeaderValue], ...] = ((CLOCK_HEADER, HeaderValue.long(at_ms)),)
    if start:
        headers += ((START_HEADER, HeaderValue.bool_(True)),)
    props = TypedBasicProperties(timestamp=at_ms // 1000, typed_headers=headers)
    channel.basic_publish(CLOCK_EXCHANGE, "", b"", props)
    return at_ms


def status(connection: RabbitMQConnection, vhost: str) -> JournalStatus:
    """Tracing per node, the journal's depth and limit, and the publishers it cannot cover."""
    nodes = node_tracing(connection, vhost)
    info = _queue_info(connection, vhost)
    with ManagementClient(connection) as client:
        bound = info is not None and any(
            b.get("source") == TRACE_EXCHANGE and b.get("routing_key") == TRACE_BINDING
            for b in client.get(f"queues/{_path(vhost)}/{quote(JOURNAL_QUEUE, safe='')}/bindings"))
        uncovered = uncovered_publishers(client, vhost)
    arguments = (info or {}).get("arguments") or {}
    limit = arguments.get("x-max-length")
    return JournalStatus(vhost, nodes, info is not None, bound, journal_depth(connection, vhost) if info else 0,
                         limit if isinstance(limit, int) else None, uncovered)


def journal_depth(connection: RabbitMQConnection, vhost: str) -> int:
    """The journal's ready messages now (a passive declare: the management API's count lags by seconds)."""
    conn = blocking_connection(connection.pika_parameters_all(vhost))
    try:
        return int(conn.channel().queue_declare(JOURNAL_QUEUE, passive=True).method.message_count)
    finally:
        _close(conn)


def _queue_info(connection: RabbitMQConnection, vhost: str) -> dict[str, Any] | None:
    with ManagementClient(connection) as client:
        try:
            return client.get(f"queues/{_path(vhost)}/{quote(JOURNAL_QUEUE, safe='')}")
        except BrokerApiError as exc:
            if exc.status == 404:
                return None
            raise


def uncovered_publishers(client: ManagementClient, vhost: str) -> list[str]:
    """The vhost's publishers the firehose may not journal: stream-protocol publishers (when the stream plugin
    answers) and connections of protocols other than AMQP 0-9-1, each named."""
    found = []
    try:
        publishers = client.get(f"stream/publishers/{_path(vhost)}")
    except BrokerApiError:
        publishers = []  # the stream plugin is off: no stream-protocol publisher can exist
    for p in publishers if isinstance(publishers, list) else []:
        queue = (p.get("queue") or {}).get("name", "?")
        conn = (p.get("connection_details") or {}).get("name", "?")
        found.append(f"stream publisher {p.get('reference') or p.get('publisher_id', '?')} on {queue} ({conn})")
    connections = client.get(f"vhosts/{_path(vhost)}/connections")
    for c in connections if isinstance(connections, list) else []:
        protocol = str(c.get("protocol") or "")
        if protocol and not protocol.startswith(COVERED_PROTOCOLS) and "Stream" not in protocol:
            found.append(f"{protocol} connection {c.get('name', '?')}")
    return found


def _close(conn: Any) -> None:
    try:
        conn.close()
    except Exception:  # noqa: BLE001 - closing a connection the broker already closed
        pass
