"""The headers a broker adds to a message when it delivers it: broker state, never message content.

A backup reads each message by receiving it, and the broker writes its own
bookkeeping into the delivery's header table: how often a quorum queue took the
message back, a stream's offset. Kept with the message, that bookkeeping would
make an unchanged message look different on each backup (4.3's
``x-acquired-count`` rises by one a backup), break the identity a resumed
capture checks, and be republished by a restore as a stale counter. So every
such header is dropped when a record is made, whatever the broker version that
delivered it: a header named here is never stored, never part of a message's
identity, never republished.

:data:`BROKER_HEADERS` is the one table; the capture, the staged records and
the tests read it (``docs/operations.md`` gives it to users). A header a new
broker version adds on delivery is a new row here, proven on that version by a
test (``tests/capture/test_broker_state_headers.py``).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class BrokerHeader:
    """One header a broker adds on delivery: its name, the queue type that adds it, since when, and why."""

    name: str
    queue_type: str
    since: str  # the first RabbitMQ version that adds it
    meaning: str


BROKER_HEADERS: tuple[BrokerHeader, ...] = (
    BrokerHeader("x-delivery-count", "quorum", "3.8",
                 "returns counted toward the queue's delivery limit (every return before 4.3; from 4.3 a channel close "
                 "or basic.reject, not basic.nack)"),
    BrokerHeader("x-acquired-count", "quorum", "4.3",
                 "times the message was delivered and came back, whichever way (from 4.3; not counted toward the limit)"),
    BrokerHeader("x-stream-offset", "stream", "3.9", "the delivery's offset in the stream"),
)


def broker_headers(queue_type: str) -> frozenset[str]:
    """The names of the headers a queue of ``queue_type`` adds on delivery (empty for a classic queue)."""
    return frozenset(h.name for h in BROKER_HEADERS if h.queue_type == queue_type)


#: Every broker-added header name, whatever the queue type.
ALL_BROKER_HEADER_NAMES = frozenset(h.name for h in BROKER_HEADERS)
