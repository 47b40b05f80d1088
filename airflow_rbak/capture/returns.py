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
* Allowed (``allow_delivery_count_increase=True``): the capture stops at the first message with *c + 1 >= L*,
  returns everything and raises ``DeliveryLimitRiskError``. Its messages end at (up to) *L*, and a message at
  *c = L* cannot be protected once received (its count is visible only after delivery), so the stop is recorded in
  the location and later captures leave the queue out before receiving anything until the risk is gone
  (:mod:`.limit_stops`). A message that reached *L* otherwise (the application's own returns) is not protected,
  which is why the increase is opt-in.
* RabbitMQ 4.3+: ``basic.nack`` does not count, so nothing is refused.
"""

from __future__ import annotations

from dataclasses import dataclass

from airflow_rbak.broker.discovery import QueueInfo, effective_delivery_limit, parse_version

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


def return_plan(info: QueueInfo, version: str) -> ReturnPlan:
    """Decide how returns behave on this broker for this queue (see the module docstring)."""
    v = parse_version(version)
    if info.queue_type != "quorum":
        return ReturnPlan("close", counts=False, limit=None)
    limit = effective_delivery_limit(info, v)
    if v < (4, 3, 0):
        return ReturnPlan("close", counts=True, limit=limit, consumers_per_channel=CONSUMERS_PER_CHANNEL)
    return ReturnPlan("nack", counts=False, limit=limit, consumers_per_channel=CONSUMERS_PER_CHANNEL)
