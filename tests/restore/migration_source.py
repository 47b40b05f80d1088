"""The source of the migration tests: a vhost as an operator leaving classic queue mirroring has it.

An ``ha-mode`` policy beside another key, a queue declared with ``x-ha-mode``
(3.x accepts it, 4.x refuses it), a ``queue-mode: lazy`` policy, a priority
queue and a dead-letter topology, each queue holding a few messages.
"""

from __future__ import annotations

from urllib.parse import quote

from tests.broker.conftest import Broker
from tests.restore.helpers import publish


def path(*parts: str) -> str:
    """A Management API path, each part quoted."""
    return "/".join(quote(p, safe="") for p in parts)


#: The transformations that move a vhost off mirrored classic queues.
MIGRATION = ["convert_to_quorum", "strip_mirroring", "drop_empty_policies"]
#: Queue -> (declare arguments, messages); the bindings below, the policies in ``set_up``.
QUEUES = {
    "orders": ({"x-dead-letter-exchange": "dlx"}, 6),
    "payments": ({"x-ha-mode": "all"}, 4),
    "audit": ({}, 3),
    "dead-letters": ({}, 2),
    "prio": ({"x-max-priority": 5}, 4),
}
BINDINGS = [("orders.x", "orders", "new"), ("orders.x", "payments", "pay"), ("orders.x", "prio", "urgent"),
            ("dlx", "dead-letters", "")]


def set_up(broker: Broker, vhost: str) -> None:
    """Create ``vhost`` with the queues, bindings and policies above, and publish each queue's messages."""
    broker.api("PUT", path("vhosts", vhost))
    broker.api("PUT", path("permissions", vhost, "guest"), json={"configure": ".*", "write": ".*", "read": ".*"})
    for name, kind in (("orders.x", "direct"), ("dlx", "fanout")):
        broker.api("PUT", path("exchanges", vhost, name), json={"type": kind, "durable": True})
    for name, (arguments, _) in QUEUES.items():
        broker.api("PUT", path("queues", vhost, name), json={"durable": True, "arguments": arguments})
    for source, queue, key in BINDINGS:
        broker.api("POST", path("bindings", vhost, "e", source, "q", queue), json={"routing_key": key})
    broker.api("PUT", path("policies", vhost, "mirrored"), json={
        "pattern": "^(orders|payments)$", "apply-to": "queues", "priority": 1,
        "definition": {"ha-mode": "all", "ha-sync-mode": "automatic", "max-length": 1000}})
    broker.api("PUT", path("policies", vhost, "lazy"), json={
        "pattern": "^audit$", "apply-to": "queues", "definition": {"queue-mode": "lazy"}})
    for name, (_, count) in QUEUES.items():
        publish(broker.connection, vhost, name, 0, count)


def stored_order(name: str) -> list[int]:
    """The order the backup stored a queue's messages in: a priority queue delivers by priority (capped at its
    maximum, first in first out within one), every other queue as published (helpers.props_of: priority i % 10)."""
    count = QUEUES[name][1]
    if name != "prio":
        return list(range(count))
    return sorted(range(count), key=lambda i: -min(i % 10, QUEUES["prio"][0]["x-max-priority"]))
