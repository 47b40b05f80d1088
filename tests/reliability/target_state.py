"""Everything a restore could change on a broker, read whole, so a test can say exactly what changed.

:func:`target_state` reads the vhosts, users (with their tags and password hashes), permissions, topic
permissions, policies, runtime and global parameters, queues (type, arguments), exchanges, bindings, and every
message of every queue (body, properties and headers, in order). Reading the messages changes nothing a test
compares: classic and quorum messages are fetched without acknowledging and go back, in order, when the channel
closes; streams are read from their first offset. :func:`changes` lists what differs between two readings as
readable lines, so an assertion failure names what a hostile object made the restore do.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

import pika
import pika.exceptions

from airflow_rbak.broker.connection import RabbitMQConnection
from airflow_rbak.broker.pika_connection import blocking_connection
from tests.restore.helpers import message_view

#: Headers the broker itself adds on delivery: they count deliveries, they are not the message.
_BROKER_HEADERS = ("x-delivery-count", "x-acquired-count", "x-stream-offset")
#: What each kind of object is known by in a definitions document.
_IDENTITY = {
    "vhosts": ("name",), "users": ("name",), "permissions": ("user", "vhost"), "topic_permissions": ("user", "vhost", "exchange"),
    "policies": ("vhost", "name"), "parameters": ("vhost", "component", "name"), "global_parameters": ("name",),
    "queues": ("vhost", "name"), "exchanges": ("vhost", "name"),
    "bindings": ("vhost", "source", "destination_type", "destination", "routing_key", "arguments"),
}
#: Fields that change without anyone changing the object (cluster-generated metadata).
_VOLATILE = {"vhosts": ("metadata", "tracing", "limits", "default_queue_type", "description", "tags")}


@dataclass(frozen=True)
class TargetState:
    """A broker's objects by kind and identity, and each queue's messages as consumers see them."""

    objects: dict[str, dict[tuple, Any]]
    messages: dict[tuple[str, str], tuple[tuple, ...]]

    def vhost_names(self) -> set[str]:
        return {key[0] for key in self.objects["vhosts"]}

    def user_names(self) -> set[str]:
        return {key[0] for key in self.objects["users"]}

    def queue_messages(self, vhost: str, queue: str) -> tuple[tuple, ...]:
        return self.messages.get((vhost, queue), ())


def _frozen(value: Any) -> Any:
    if isinstance(value, dict):
        return tuple(sorted((k, _frozen(v)) for k, v in value.items()))
    if isinstance(value, list):
        return tuple(_frozen(v) for v in value)
    return value


def _objects(definitions: dict[str, Any]) -> dict[str, dict[tuple, Any]]:
    found: dict[str, dict[tuple, Any]] = {}
    for kind, fields in _IDENTITY.items():
        volatile = _VOLATILE.get(kind, ())
        found[kind] = {
            tuple(_frozen(item.get(f)) for f in fields): _frozen({k: v for k, v in item.items() if k not in volatile})
            for item in definitions.get(kind) or []
        }
    return found


def _messages_of(connection: RabbitMQConnection, vhost: str, queue: dict[str, Any]) -> tuple[tuple, ...]:
    """A queue's messages in order; classic and quorum ones are returned to the queue when the channel closes."""
    views: list[tuple] = []
    try:
        with blocking_connection(connection.pika_parameters(vhost)) as conn:
            channel = conn.channel()
            if queue.get("type") == "stream":
                depth = int(queue.get("messages") or 0)
                channel.basic_qos(prefetch_count=1000)
                for method, props, body in channel.consume(queue["name"], arguments={"x-stream-offset": "first"},
                                                           inactivity_timeout=1.0):
                    if method is None:
                        break
                    views.append(message_view(props, body))
                    channel.basic_ack(method.delivery_tag)
                    if depth and len(views) >= depth:
                        break
                channel.cancel()
            else:
                while True:
                    method, props, body = channel.basic_get(queue["name"], auto_ack=False)
                    if method is None:
                        break
                    views.append(message_view(props, body))
            channel.close()  # unacknowledged messages go back, in their order
    except pika.exceptions.AMQPError as exc:  # an exclusive queue of another connection, a queue deleted meanwhile
        return (("unreadable", type(exc).__name__),)
    return tuple(_without_broker_headers(v) for v in views)


def _without_broker_headers(view: tuple) -> tuple:
    body, props, headers = view
    return body, props, tuple(h for h in headers if h[0] not in _BROKER_HEADERS)


def target_state(broker: Any) -> TargetState:
    """Read the broker whole (``broker``: the tests' :class:`~tests.broker.conftest.Broker`)."""
    definitions = broker.api("GET", "definitions").json()
    messages = {}
    for queue in broker.api("GET", "queues").json():
        if queue.get("exclusive") or queue.get("owner_pid_details"):
            continue
        messages[(queue["vhost"], queue["name"])] = _messages_of(broker.connection, queue["vhost"], queue)
    return TargetState(_objects(definitions), messages)


def changes(before: TargetState, after: TargetState) -> list[str]:
    """What differs, one line per object or queue: ``created``, ``deleted``, ``changed``, ``messages``."""
    lines: list[str] = []
    for kind in _IDENTITY:
        old, new = before.objects[kind], after.objects[kind]
        lines += [f"created {kind} {key}" for key in sorted(set(new) - set(old), key=repr)]
        lines += [f"deleted {kind} {key}" for key in sorted(set(old) - set(new), key=repr)]
        lines += [f"changed {kind} {key}" for key in sorted(set(old) & set(new), key=repr) if old[key] != new[key]]
    for key in sorted(set(before.messages) | set(after.messages)):
        old_m, new_m = before.messages.get(key, ()), after.messages.get(key, ())
        if old_m != new_m:
            lines.append(f"messages {key[0]}/{key[1]}: {len(old_m)} -> {len(new_m)}")
    return lines


def only_in(lines: list[str], *vhosts: str) -> list[str]:
    """The change lines that concern none of ``vhosts`` (what a restore into them must leave empty)."""
    names = [repr(v) for v in vhosts] + [f" {v}/" for v in vhosts]
    return [line for line in lines if not any(n in line for n in names)]


def vhost_path(vhost: str) -> str:
    return quote(vhost, safe="")
