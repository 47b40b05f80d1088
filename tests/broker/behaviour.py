"""What the broker under test does, by the exact version it reports: the tests' expectations per RabbitMQ series.

The code decides from a version (``capture/returns.py``, ``capture/queue_features.py``); a test that asserted its
own copy of those decisions would prove nothing. This table is written from what the brokers were seen to do
(RabbitMQ 3.10.8, 4.0.5 and 4.3.6 on loopback), independently of the code, and a test asserts it against the broker
of the session: a broker that behaves otherwise fails the test. Each rule names its series; the version comes from
the broker itself (:attr:`tests.broker.conftest.Broker.version`), never from the environment.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

#: RabbitMQ 4.0 quorum queues: a message of priority above this is "high"; high and normal go out two to one.
QUORUM_HIGH_PRIORITY_ABOVE_4_0 = 4
#: RabbitMQ 4.3 quorum queues: priorities 0..31, each a level of its own, the higher delivered first.
QUORUM_PRIORITY_LEVELS_4_3 = 32
#: The delivery limit a quorum queue has from RabbitMQ 4.0 when nothing sets one.
DEFAULT_QUORUM_DELIVERY_LIMIT_4X = 20
#: Queue settings no policy can set (RabbitMQ refuses the key, 400, on 3.10, 4.0 and 4.3): declared with the queue only.
DECLARATION_ONLY = frozenset({"exclusive", "auto-delete", "single-active-consumer"})
#: Keys an operator policy may set on every series (4.3.6 takes overflow too; none takes dead-lettering or consumer-timeout).
OPERATOR_POLICY_KEYS = frozenset({"expires", "message-ttl", "max-length", "max-length-bytes", "delivery-limit"})
#: Policy keys and the series from which RabbitMQ accepts them (a per-queue consumer timeout arrived in 3.12).
POLICY_KEYS_SINCE = {"consumer-timeout": (3, 12)}


def _series(version: str) -> tuple[int, int]:
    """``(4, 3)`` of ``4.3.6``; a version that does not say its series fails the test rather than pass for 3.10."""
    major, _, rest = version.partition(".")
    minor = rest.partition(".")[0]
    if not (major.isdigit() and minor.isdigit()):
        raise AssertionError(f"the broker reported no usable version ({version!r}): cannot tell what it should do")
    return int(major), int(minor)


@dataclass(frozen=True)
class Behaviour:
    """The observed behaviour of one RabbitMQ version, for the tests' expectations."""

    version: str

    @property
    def series(self) -> tuple[int, int]:
        return _series(self.version)

    def sorts_headers(self, queue_type: str, returned: bool = False) -> bool:
        """Whether a delivered message's header table comes sorted by key rather than in the publisher's order.

        3.10: a stream always, a quorum queue once the message was returned, a classic queue never.
        4.0 and 4.3: every queue type, on every delivery."""
        if self.series >= (4, 0) or queue_type == "stream":
            return True
        return queue_type == "quorum" and returned

    def stream_bytes_as_long_string(self) -> bool:
        """Whether a stream delivers an AMQP 0-9-1 byte-array header (``x``) back as a long string (``S``) of the same
        bytes: from 4.0 (a stream stores AMQP 1.0, where the value is binary, and 0-9-1 has no binary type of its own)."""
        return self.series >= (4, 0)

    def stream_keeps_table_headers(self) -> bool:
        """Whether a stream keeps table- and array-valued headers published over AMQP 0-9-1: from 4.0 (3.10 drops them)."""
        return self.series >= (4, 0)

    def delivery_order(self, queue_type: str, priorities: Sequence[int]) -> list[int]:
        """The indices of messages published in order with ``priorities``, in the order the queue delivers them.

        Classic queues without ``x-max-priority`` and 3.10 quorum queues ignore priority (publish order). 4.0
        quorum queues keep two levels (above 4 is high): of every three deliveries the first two take the oldest
        high message (a normal one when no high is left) and the third the older of the two levels' oldest; so two
        high for one normal while normal messages wait longer, but high ones all first when they are all older
        (a restore of 4.3's order: measured on 4.0.5). 4.3 quorum queues keep 32 levels and deliver the higher
        first. Publish order within a level."""
        indices = list(range(len(priorities)))
        if queue_type != "quorum" or self.series < (4, 0):
            return indices
        if self.series >= (4, 3):
            top = QUORUM_PRIORITY_LEVELS_4_3 - 1
            return sorted(indices, key=lambda i: -min(priorities[i], top))
        high = [i for i in indices if priorities[i] > QUORUM_HIGH_PRIORITY_ABOVE_4_0]
        normal = [i for i in indices if priorities[i] <= QUORUM_HIGH_PRIORITY_ABOVE_4_0]
        order: list[int] = []
        counter = 0  # deliveries since the last third one
        while high or normal:
            if high and normal and counter == 2:
                level = high if high[0] < normal[0] else normal
            else:
                level = high or normal
            order.append(level.pop(0))
            counter = 0 if counter == 2 else counter + 1
        return order

    def refuses_queue_version_1(self) -> bool:
        """Whether a declare or definitions import of a classic queue with ``x-queue-version: 1`` is refused
        ("unsupported queue version"): 4.3; 4.0 takes it and ignores it (v1 was removed, every queue is v2), 3.10
        makes a version 1 queue."""
        return self.series >= (4, 3)

    def quorum_orders_priorities(self) -> bool:
        """Whether a quorum queue delivers by each message's priority (from 4.0; 3.10 refuses ``x-max-priority`` on a
        quorum queue and delivers in publish order)."""
        return self.series >= (4, 0)

    def consumer_timeout_enforced_on(self) -> str:
        """A queue type on which the broker enforces a ``consumer_timeout`` set at run time, taking the messages of a
        consumer that held them too long back: a classic queue on 3.10 (it closes the channel); a quorum queue on 4.3
        (it cancels the consumer, the channel stays open; classic queues have no consumer timeout there)."""
        return "quorum" if self.series >= (4, 3) else "classic"

    def per_queue_consumer_timeout_on(self) -> str:
        """A queue type that takes an ``x-consumer-timeout`` argument: classic before 4.3 (3.10 keeps it as an argument
        of no effect, and a policy key only from 3.12); quorum from 4.3, which refuses it on a classic queue."""
        return "quorum" if self.series >= (4, 3) else "classic"

    def returns_count(self, queue_type: str) -> bool:
        """Whether giving a delivered message back raises its ``x-delivery-count`` (and so counts toward a delivery
        limit): quorum queues before 4.3; 4.3 counts a ``basic.nack`` in ``x-acquired-count`` instead."""
        return queue_type == "quorum" and self.series < (4, 3)

    def default_delivery_limit(self, queue_type: str) -> int | None:
        """The delivery limit of a quorum queue that sets none: 20 from 4.0, none before."""
        return DEFAULT_QUORUM_DELIVERY_LIMIT_4X if queue_type == "quorum" and self.series >= (4, 0) else None

    def announces_max_message_size(self) -> bool:
        """Whether the node tells a client its ``max_message_size`` (in the AMQP 1.0 attach; 4.x serves AMQP 1.0 without
        a plugin): from 4.0. A 3.10 node has no AMQP 1.0 unless its plugin is enabled, so its limit is its version's."""
        return self.series >= (4, 0)

    def reports_delivery_limit(self) -> bool:
        """Whether the management API gives a quorum queue's delivery limit as the broker applies it (the queue's
        ``delivery_limit`` field: a number, or ``unlimited``): 4.x does; 3.10 has no such field."""
        return self.series >= (4, 0)

    def backup_leaves_out_by_default(self, queue_type: str) -> bool:
        """Whether a backup leaves a queue of this type with no limit of its own out unless
        ``allow_delivery_count_increase``: where returns count and a default limit applies (4.0 quorum)."""
        return self.returns_count(queue_type) and self.default_delivery_limit(queue_type) is not None

    def declared_arguments(self, arguments: dict) -> dict:
        """A queue's arguments as the management API shows them after a declare without ``x-queue-type``: 4.0 and 4.3
        add ``x-queue-type: classic`` (the default queue type, now recorded), 3.10 shows them as declared."""
        return {**arguments, "x-queue-type": "classic"} if self.series >= (4, 0) else dict(arguments)

    def policy_accepts(self, key: str, operator: bool = False) -> bool:
        """Whether a (operator) policy may set ``key`` on this broker; it refuses one that may not (400)."""
        if key in DECLARATION_ONLY or (operator and key not in OPERATOR_POLICY_KEYS):
            return False
        return self.series >= POLICY_KEYS_SINCE.get(key, (0, 0))

    def counters_on_first_delivery(self, queue_type: str, limited: bool) -> dict[str, int]:
        """The broker counters a message never delivered before carries: 3.10 sends ``x-delivery-count: 0`` from a
        quorum queue with a delivery limit of its own (argument or policy); 4.x sends none until it was returned."""
        return {"x-delivery-count": 0} if queue_type == "quorum" and limited and self.series < (4, 0) else {}

    def counters_after_returns(self, queue_type: str, counters: dict[str, int], returns: int) -> dict[str, int]:
        """A message's broker counters after ``returns`` more returns the way a backup and the tests give messages
        back (a channel close before 4.3, ``basic.nack`` from 4.3, both for one requeueing nack): a quorum queue raises
        ``x-delivery-count`` before 4.3 and ``x-acquired-count`` from 4.3; a classic queue keeps none."""
        if queue_type != "quorum" or returns == 0:
            return dict(counters)
        key = "x-delivery-count" if self.returns_count(queue_type) else "x-acquired-count"
        return {**counters, key: counters.get(key, 0) + returns}


def message_priorities(count: int) -> list[int]:
    """The priorities of the test messages ``0..count-1`` (``tests/broker/messages.py``, ``tests/restore/helpers.py``)."""
    return [i % 10 for i in range(count)]
