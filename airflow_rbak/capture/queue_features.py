"""What a backup does with each queue feature, and why that is safe: the one table that code and docs follow.

A capture reads a queue by taking its messages without ack and giving
them all back. Compared with leaving the queue alone for the same time,
that must change nothing but the ``redelivered`` flag (and, where allowed,
quorum delivery counts). Which versions count a return is the version table's
(:mod:`airflow_rbak.broker.versions`), not this module's. Some features make that impossible or need
another way of reading; :data:`FEATURES` lists each one with what the
backup does, and :func:`decide` applies it to one queue: capture by
consumers, by ``basic.get``, one consumer at a time, or leave the queue
out with a reason, *before* its first message is received. Measured on
RabbitMQ 3.10.8 (measured):

* An auto-delete queue is deleted with its messages when its last
  consumer is cancelled, even one that never acked; ``basic.get``
  registers no consumer.
* A single-active-consumer queue delivers to one consumer at a time, and
  a cancelled consumer keeps its unacked messages while the next one
  becomes active. A classic one answers ``basic.get`` past an
  application's active consumer; a quorum one refuses ``basic.get`` (405).
* ``basic.get`` costs a round trip per message (1,000-3,000 msg/s), so it
  is used only where a consumer would do harm. A classic queue takes back
  messages read that way slowly by ``basic.nack`` (2,000 in 0.2 s, 20,000
  in 65-139 s, the queue answering nothing else meanwhile) but at once
  when their channel closes (20,000 in 0.07-0.09 s, in order): the capture
  returns them by closing it (:mod:`.returns`).
* Held messages do not count toward ``max-length``: with
  ``drop-head`` the same oldest messages are dropped on return as would
  have been at publish (same queue afterwards); with ``reject-publish``
  the queue accepts what it would have refused and ends over its limit.
* Reading a queue restarts its ``expires`` timer.
"""

from __future__ import annotations

import enum
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from airflow_rbak.broker.discovery import QueueInfo
from airflow_rbak.broker.versions import QUORUM_RETURNS_COUNT, series_text
from airflow_rbak.capture.returns import ReturnPlan, return_plan
from airflow_rbak.codec.journal_layout import JOURNAL_QUEUE

#: The first RabbitMQ series whose returns count toward no delivery limit (the version table's row), as text: ``4.3``.
RETURNS_STOP_COUNTING = series_text(QUORUM_RETURNS_COUNT.since(False))
#: RabbitMQ's default ``consumer_timeout`` (rabbitmq.conf), in milliseconds.
DEFAULT_CONSUMER_TIMEOUT_MS = 1_800_000


class CaptureMethod(str, enum.Enum):
    """How a queue's messages are read."""

    CONSUMERS = "consumers"  # a staircase of consumers, each with one window of prefetch
    ONE_CONSUMER_AT_A_TIME = "one consumer at a time"  # each cancelled (keeping its messages) before the next opens
    GET = "basic.get"  # no consumer at all
    STREAM = "stream protocol"  # by offset; nothing is held
    LEAVE_OUT = "left out"


@dataclass(frozen=True)
class QueueDecision:
    """What the backup does with one queue; ``reason`` says why a queue is left out."""

    method: CaptureMethod
    reason: str | None = None
    return_plan: ReturnPlan | None = None

    @property
    def left_out(self) -> bool:
        return self.method is CaptureMethod.LEAVE_OUT


@dataclass(frozen=True)
class Facts:
    """What a decision needs besides the queue: the broker and the user's permissions."""

    broker_version: str
    allow_delivery_count_increase: bool = False


def _setting(info: QueueInfo, argument: str, policy_key: str) -> Any:
    """A queue argument, else its (operator) policy's value: the argument wins as RabbitMQ applies it."""
    for source, key in ((info.arguments, argument), (info.effective_policy, policy_key), (info.operator_policy, policy_key)):
        if source.get(key) is not None:
            return source[key]
    return None


def _overflow(info: QueueInfo) -> str:
    return str(_setting(info, "x-overflow", "overflow") or "drop-head")


def _max_length(info: QueueInfo) -> Any:
    return _setting(info, "x-max-length", "max-length") or _setting(info, "x-max-length-bytes", "max-length-bytes")


def consumer_timeout_ms(info: QueueInfo, broker_default_ms: int) -> int:
    """The consumer timeout the broker applies to this queue's deliveries (per-queue settings exist from 3.12)."""
    value = _setting(info, "x-consumer-timeout", "consumer-timeout")
    try:
        return int(value) if value is not None and int(value) > 0 else broker_default_ms
    except (TypeError, ValueError):
        return broker_default_ms


def _delivery_limit_reason(info: QueueInfo, facts: Facts) -> str | None:
    plan = return_plan(info, facts.broker_version)
    if not (plan.counts and plan.limit is not None):
        return None
    if plan.captures_nothing:
        return (f"RabbitMQ {facts.broker_version} counts every returned message toward this quorum queue's delivery "
                f"limit of {plan.limit}, and a backup must stop before its return could bring a message to the limit "
                "(its consumers would have no retry left): under this limit it would stop at the first message, so "
                "it is left out even with allow_delivery_count_increase; raise the limit above 2, remove it, or "
                f"upgrade to RabbitMQ {RETURNS_STOP_COUNTING}+")
    if facts.allow_delivery_count_increase:
        return None
    return (f"RabbitMQ {facts.broker_version} counts every returned message toward this quorum queue's delivery limit "
            f"of {plan.limit}, so each backup would raise every message's x-delivery-count and repeated backups would "
            f"drop or dead-letter them; remove the limit, upgrade to RabbitMQ {RETURNS_STOP_COUNTING}+, or set "
            "allow_delivery_count_increase=True")


@dataclass(frozen=True)
class Feature:
    """One row of the table: when it applies, what the backup does, why that is safe, and how the code acts."""

    name: str
    applies: Callable[[QueueInfo], bool]
    action: str
    why: str
    method: CaptureMethod | None = None
    #: The reason to leave the queue out, or None to capture it (``method`` or the default way).
    leave_out: Callable[[QueueInfo, Facts], str | None] | None = None


def _is_sac(info: QueueInfo) -> bool:
    return bool(_setting(info, "x-single-active-consumer", "single-active-consumer"))


#: In order of precedence: the first feature that leaves a queue out decides; otherwise the first forced method.
FEATURES: tuple[Feature, ...] = (
    Feature(
        f"the journal ({JOURNAL_QUEUE})",
        lambda q: q.name == JOURNAL_QUEUE,
        "left out",
        "it holds the vhost's publishes since the journal's last archive, which its archiver drains into journal "
        "archives (docs/operations.md); a backup holding them too would publish them again on a restore",
        leave_out=lambda q, f: "the journal queue: its archiver archives it (rbak journal archive)",
    ),
    Feature(
        "exclusive",
        lambda q: q.exclusive,
        "left out",
        "only the connection that declared it may read it (405 RESOURCE_LOCKED), and it disappears with "
        "that connection: no backup can read it",
        leave_out=lambda q, f: "exclusive queue: only the connection that declared it can read it",
    ),
    Feature(
        "expires (x-expires or policy)",
        lambda q: _setting(q, "x-expires", "expires") is not None,
        "left out",
        "reading a queue restarts its expiry timer: a scheduled backup would keep alive a queue the broker is meant to delete",
        leave_out=lambda q, f: f"reading it would restart its expiry timer (expires {_setting(q, 'x-expires', 'expires')} ms)",
    ),
    Feature(
        f"delivery limit on a quorum queue, RabbitMQ before {RETURNS_STOP_COUNTING}",
        lambda q: q.queue_type == "quorum",
        "left out unless allow_delivery_count_increase (always under a limit of 2 or less); then captured, stopping "
        "before any return brings a message to the limit, and left out after such a stop until the queue is seen "
        "empty or its limit raised",
        f"every return counts toward the limit before {RETURNS_STOP_COUNTING} (basic.nack and channel close alike), so "
        "repeated backups would drop or dead-letter messages",
        leave_out=_delivery_limit_reason,
    ),
    Feature(
        "max-length with overflow reject-publish or reject-publish-dlx",
        lambda q: _max_length(q) is not None and _overflow(q) != "drop-head",
        "left out",
        "held messages do not count toward the limit: the queue would accept publishes it would have "
        "refused, and end over its limit when they come back",
        leave_out=lambda q, f: (
            f"max-length with overflow {_overflow(q)}: while its messages are held the queue would "
            "accept publishes it would have refused"
        ),
    ),
    Feature(
        "single active consumer, quorum",
        lambda q: q.queue_type == "quorum" and _is_sac(q),
        "left out while another consumer is attached; otherwise read one consumer at a time",
        "only the active consumer receives and 3.10 refuses basic.get on these queues; a cancelled consumer keeps its "
        "messages while the next one becomes active, and channels close in order",
        method=CaptureMethod.ONE_CONSUMER_AT_A_TIME,
        leave_out=lambda q, f: (
            (
                "single-active-consumer quorum queue with an attached consumer: it delivers only to that "
                "consumer and refuses basic.get"
            )
            if q.consumers
            else None
        ),
    ),
    Feature(
        "single active consumer, classic, with a consumer attached",
        lambda q: q.queue_type != "quorum" and _is_sac(q) and q.consumers > 0,
        "read by basic.get",
        "the attached consumer is the active one; basic.get reads past it and registers no consumer",
        method=CaptureMethod.GET,
    ),
    Feature(
        "single active consumer, classic",
        lambda q: q.queue_type != "quorum" and _is_sac(q),
        "read one consumer at a time",
        "only the active consumer receives; a cancelled consumer keeps its messages "
        "while the next one becomes active, and closing their channel gives them all back, each to its position",
        method=CaptureMethod.ONE_CONSUMER_AT_A_TIME,
    ),
    Feature(
        "auto-delete",
        lambda q: q.auto_delete,
        "read by basic.get",
        "the queue is deleted with its messages when its last consumer is cancelled; basic.get registers no consumer",
        method=CaptureMethod.GET,
    ),
    Feature(
        "max-length with overflow drop-head",
        lambda q: _max_length(q) is not None and _overflow(q) == "drop-head",
        "captured",
        "held messages do not count toward the limit, and on return the broker drops the same oldest "
        "messages it would have dropped at publish: the queue ends as it would have",
    ),
    Feature(
        "message TTL (x-message-ttl, policy, per message)",
        lambda q: _setting(q, "x-message-ttl", "message-ttl") is not None,
        "captured",
        "a held message does not expire; when it comes back, one whose TTL has passed is dropped or "
        "dead-lettered as it would have been",
    ),
    Feature(
        "dead-lettering (x-dead-letter-exchange)",
        lambda q: _setting(q, "x-dead-letter-exchange", "dead-letter-exchange") is not None,
        "captured",
        "messages go back with requeue, never rejected, so the backup dead-letters nothing",
    ),
    Feature(
        "consumer timeout",
        lambda q: True,
        "captured within the timeout",
        "every message is back before the oldest held one reaches the broker's "
        "consumer_timeout (consumer_timeout_ms, 30 min by default; x-consumer-timeout or a consumer-timeout policy where "
        "the broker has them), and before max_hold_ms where it is set and lower (docs/production.md); a capture that cannot "
        "finish in time stops, gives everything back and fails",
    ),
    Feature(
        "stream",
        lambda q: q.queue_type == "stream",
        "read by the stream protocol, whatever the rows above say",
        "a stream is read by offset: nothing is held, removed or redelivered, so no other row applies",
        method=CaptureMethod.STREAM,
    ),
)


def decide(info: QueueInfo, facts: Facts) -> QueueDecision:
    """What the backup does with ``info`` (see :data:`FEATURES`)."""
    if info.queue_type == "stream":
        return QueueDecision(CaptureMethod.STREAM)
    forced: CaptureMethod | None = None
    for feature in FEATURES:
        if not feature.applies(info):
            continue
        reason = feature.leave_out(info, facts) if feature.leave_out else None
        if reason:
            return QueueDecision(CaptureMethod.LEAVE_OUT, reason)
        forced = forced or feature.method
    return QueueDecision(forced or CaptureMethod.CONSUMERS, None, return_plan(info, facts.broker_version))

