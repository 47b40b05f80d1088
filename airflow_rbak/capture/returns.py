"""How a capture gives its messages back, and when returning them would harm a quorum queue.

Every captured message was delivered without ack; at the end all of them go
back, in order (the capture cancels its consumers first, so nothing can be
delivered to it again). The capture holds them on channels of their own
(its depth queries use another), so a return can be a channel's close:

* ``"close"`` on a classic queue: closing the one channel that holds
  them. A classic queue puts each returned message back at its own
  position. Measured on 3.10.8 (``bench/returns.py``, docs/performance.md):
  150,000 consumed messages are back 0.2-0.5 s sooner than after one
  ``basic.nack(multiple, requeue)``, and 20,000 messages read by
  ``basic.get`` are back in 0.07-0.09 s, against 124-139 s for the nack
  (the queue answers nothing else meanwhile).
* ``"nack"``: one ``basic.nack(multiple, requeue)`` on that channel.
  Quorum queues from RabbitMQ 4.3, where a nack does not count toward a
  delivery limit and a close does.
* ``"close"`` on a quorum queue before 4.3, where a nack counts toward
  the limit just as a close does, and RabbitMQ 3.10 handles it far worse
  (measured on 3.10.8): without a delivery limit it reads every nacked
  message back from the Raft log and appends it again (50,000 messages of
  1 KiB kept the queue's leader busy 2 to 8 s, during which it answers its
  count as 0: a capture started then backed up nothing, or failed); with a
  limit it puts each consumer's messages back in hash order, scrambling
  the queue. A closed channel's messages go back in memory within about
  0.1 s, in delivery order per consumer and in consumer-tag order across
  that channel's consumers, but only up to :data:`CONSUMERS_PER_CHANNEL` of
  them (past that the broker walks a hash map). So a quorum capture puts
  at most that many consumers on a channel, and closes its channels one
  at a time, each once the queue's depth shows the previous one's
  messages back. If the connection drops instead, the broker returns
  every channel at once; past 32 consumers (about 2 million messages at
  the default window) the channels' groups may then come back in either
  order.

The delivery-limit rule, exactly (``return_plan``, ``queue_features``,
the capture's ``_reaches_limit``). Let *L* be the effective limit (smallest of
``x-delivery-limit``, the policy's and the operator policy's
``delivery-limit``; 20 by default from 4.0) and *c* a message's
``x-delivery-count`` when we receive it (absent = 0). Every return makes it
*c + 1*; 3.10 drops or dead-letters a message whose count after a return
exceeds *L* (measured: with *L* = 3, the fourth return loses it).

* Returns count (RabbitMQ < 4.3, quorum, *L* set) and not allowed: the
  queue is left out before any message is consumed
  (:mod:`.queue_features`). Safe however often it runs.
* Allowed (``allow_delivery_count_increase=True``): every capture spends one
  of each message's *L* returns. The capture stops at the first message with
  *c + 1 >= L* (one short of what 3.10 tolerates, so also safe where a
  version drops at *c + 1 = L*), returns everything it received, and raises
  ``DeliveryLimitRiskError``. What it cannot do is protect a message it has
  already received: a count is visible only after delivery, and a delivered
  message goes back with *c + 1*. So a message already at *c = L* when a
  capture receives it is lost, and the run that stopped leaves the messages
  it received at *c + 1 = L*: measured on 3.10 with *L* = 3, allowed runs
  1-2 succeed, run 3 stops (no loss), run 4 loses every message it receives.
  Allow it only when the application consumes the queue well within
  *L - 1* captures; never schedule allowed captures after one has stopped.
* RabbitMQ 4.3+: ``basic.nack`` does not count, so nothing is refused.
"""

from __future__ import annotations

from dataclasses import dataclass

from airflow_rbak.broker.discovery import QueueInfo, effective_delivery_limit, parse_version

#: A closed channel's consumers go back in tag order only up to this many (the broker keeps them in an Erlang map,
#: which iterates in key order only while it holds at most 32 keys).
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
    return ReturnPlan("nack", counts=False, limit=limit)
