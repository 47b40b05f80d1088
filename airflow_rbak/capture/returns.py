"""How a capture gives its messages back, and when returning them would harm a quorum queue.

Every captured message was delivered without ack; at the end all of them go back, in order (the consumers are
cancelled first, so nothing is delivered to us again). The capture holds them on channels of their own, so a
return can be a channel's close:

* ``"close"`` on a classic queue: each message goes back to its own position, far sooner than after a
  requeueing ``basic.nack``, which keeps a queue read by ``basic.get`` busy for minutes.
* ``"nack"`` (one ``basic.nack(multiple, requeue)`` per holding channel): quorum queues from RabbitMQ 4.3, where a
  nack does not count toward a delivery limit and a close does. A channel's nacked messages go back per consumer in
  consumer-tag order only up to :data:`CONSUMERS_PER_CHANNEL` consumers too (measured on 4.3.6: 40 consumers on one
  channel came back with one consumer's messages out of place), so this plan also puts at most that many on a channel
  and nacks the channels one at a time.
* ``"close"`` on a quorum queue before 4.3: a nack counts there too, and 3.10 re-appends every nacked message to
  the Raft log (its leader busy for seconds, answering its depth as 0) or, under a limit, scrambles them. A
  closed channel's messages go back in delivery order per consumer and in consumer-tag order, but only up to
  :data:`CONSUMERS_PER_CHANNEL` consumers, so a quorum capture puts at most that many on a channel and closes
  its channels one at a time, each once the depth shows the previous one's messages back.

The delivery-limit rule (``return_plan``; docs/operations.md says it for users). Let *L* be the effective limit
and *c* a message's ``x-delivery-count`` when received; every return makes it *c + 1*, and a message whose count
after a return exceeds *L* is dropped or dead-lettered.

* Returns count (RabbitMQ < 4.3, quorum, *L* set) and not allowed: the queue is left out before any message is
  consumed (:mod:`.queue_features`).
* Allowed (``allow_delivery_count_increase=True``): the capture stops at the first message with *c + 2 >= L*,
  returns everything and raises ``DeliveryLimitRiskError``: no capture's return brings a message to *L* (where a
  consumer of the application would have no retry left), so its messages end at (up to) *L - 1*. The next
  capture's return would bring those to *L*, and it cannot see a count before receiving the message, so the stop
  is recorded, sealed, in the location and in the deployment's ledger outside it, and later captures leave the queue
  out before receiving anything until the risk is gone (:mod:`.limit_stops`). Under a limit *L <= 2* even a message
  never returned stops the capture (*L <= 1*: any return reaches the limit), so such a queue is left out before
  anything is received, even when allowed. A
  message the application's own returns brought to *c >= L - 1* is not protected (this capture's return brings it
  to *L* or past it), which is why the increase is opt-in.
* RabbitMQ 4.3+: ``basic.nack`` does not count, so nothing is refused.
"""

from __future__ import annotations

from dataclasses import dataclass

from airflow_rbak.broker.discovery import QueueInfo, effective_delivery_limit
from airflow_rbak.broker.versions import QUORUM_RETURN_METHOD, QUORUM_RETURNS_COUNT, parse_version

#: A closed (or, from 4.3, nacked) channel's consumers go back in tag order only up to this many (the broker keeps them
#: in an Erlang map, which iterates in key order only while it holds at most 32 keys).
CONSUMERS_PER_CHANNEL = 32


@dataclass(frozen=True)
class ReturnPlan:
    """How captured messages go back, and whether that counts toward a delivery limit."""

    method: str  # "nack" or "close" (module docstring)
    counts: bool
    limit: int | None
    #: Consumers that may share a channel (None: any number); quorum queues return a channel's consumers in order only
    #: up to :data:`CONSUMERS_PER_CHANNEL`.
    consumers_per_channel: int | None = None

    def stops_at(self, delivery_count: int) -> bool:
        """Whether a capture must stop at a message received with this ``x-delivery-count``: after its return, the
        next capture's would bring it to the limit (*c + 2 >= L*, module docstring)."""
        return self.counts and self.limit is not None and delivery_count + 2 >= self.limit

    @property
    def captures_nothing(self) -> bool:
        """A limit of 2 or less: even a message never returned (count 0) stops a capture at once, so an allowed one
        could take nothing and would only raise counts; the queue is left out before anything is received."""
        return self.stops_at(0)


def return_plan(info: QueueInfo, version: str) -> ReturnPlan:
    """Decide how returns behave on this broker for this queue (see the module docstring); the version boundaries are
    the version table's (``QUORUM_RETURN_METHOD``, ``QUORUM_RETURNS_COUNT`` in :mod:`airflow_rbak.broker.versions`)."""
    v = parse_version(version)
    if info.queue_type != "quorum":
        return ReturnPlan("close", counts=False, limit=None)
    return ReturnPlan(QUORUM_RETURN_METHOD.value(v), counts=QUORUM_RETURNS_COUNT.value(v),
                      limit=effective_delivery_limit(info, v), consumers_per_channel=CONSUMERS_PER_CHANNEL)
