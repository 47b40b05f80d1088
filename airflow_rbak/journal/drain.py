"""Draining the journal queue up to a clock mark: what one archive run reads, and where it stops.

The consumer's unacked deliveries are bounded by the prefetch (``max_messages``): nothing is acked before the
archive's manifest is stored, so a run holds at most that many. Records are stored only up to a clock mark: those
after the last mark are held back (in memory, bounded) until the next mark arrives, so a run can always stop at the
last mark it read, and ``to`` is that mark. What the run did not store it never acks; the broker delivers it again
to the next run. The run stops at the first of: its own mark followed by nothing (the journal is empty), the mark it
publishes when ``seconds`` have passed, ``max_messages`` deliveries, or that mark not arriving within the grace.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

from airflow_rbak.broker.amqp_types import headers_of
from airflow_rbak.broker.journal import publish_mark
from airflow_rbak.codec import BackupRecord
from airflow_rbak.codec.journal_layout import JOURNAL_QUEUE
from airflow_rbak.display import package_logger
from airflow_rbak.journal.trace_record import TraceMessageError, read_trace

log = package_logger(__name__)

#: Records held back after the last mark beyond this many bytes stop the run at that mark.
MAX_HELD_BYTES = 64 * 1024**2


@dataclass
class DrainLimits:
    """How long and how much one run drains."""

    seconds: float = 60.0
    max_messages: int = 50_000
    mark_every: float = 1.0
    #: How long after ``seconds`` the run waits for its last mark to come through the journal.
    grace: float = 30.0


@dataclass
class Drained:
    """Where the run stopped: the last mark stored and what came before it."""

    first_mark: int | None = None
    #: The journal's first clock mark this run read (the enable's, on a first run).
    first_seen_mark: int | None = None
    last_mark: int | None = None
    last_mark_tag: int | None = None
    messages: int = 0
    redelivered: int = 0
    #: Publishes the source routed to no queue, read and acked but not kept (:attr:`Trace.went_nowhere`).
    went_nowhere: int = 0
    #: Delivery tags of messages that were not firehose traces (rejected once the archive is stored).
    foreign: list[int] = field(default_factory=list)
    records_before_first_mark: bool = False
    #: Gaps the journal itself shows: each start mark read after a lower bound (journaling was off before it).
    gaps: list[dict[str, Any]] = field(default_factory=list)
    stop_reason: str = ""


class JournalDrain:
    """Reads the journal on ``channel`` and hands each stored record to ``store``; marks go out on ``marks``."""

    def __init__(self, channel: Any, marks: Any, vhost: str, store: Callable[[BackupRecord], None],
                 limits: DrainLimits, bound: int | None) -> None:
        self.channel = channel
        self.marks = marks
        self.vhost = vhost
        self.store = store
        self.limits = limits
        #: The lower bound of the next record's publish time (the last mark read; first: the previous archive's to).
        self.bound = bound
        self.own: set[int] = set()
        self.held: list[BackupRecord] = []
        self.held_bytes = 0
        self.held_foreign: list[int] = []
        self.held_nowhere = 0
        self.done = Drained()

    def run(self) -> Drained:
        limits, channel = self.limits, self.channel
        channel.basic_qos(prefetch_count=limits.max_messages)
        started = time.monotonic()
        deadline = started + limits.seconds
        self.done.first_mark = self._mark()
        last_sent, final, after_own, delivered = started, None, False, 0
        for delivery in channel.consume(JOURNAL_QUEUE, exclusive=True, inactivity_timeout=0.2):
            now = time.monotonic()
            if final is None and now >= deadline:
                final = self._mark()
            elif final is None and now - last_sent >= limits.mark_every:
                self._mark()
                last_sent = now
            if delivery[0] is None:
                reason = self._idle_stop(after_own, delivered, final is not None and now > deadline + limits.grace)
                if reason:
                    self.done.stop_reason = reason
                    break
                continue
            delivered += 1
            method, props, body = delivery
            stop, after_own = self._take(method, props, body, final)
            if stop:
                self.done.stop_reason = "the run's time was up"
                break
            if self.held_bytes > MAX_HELD_BYTES:
                self.done.stop_reason = f"more than {MAX_HELD_BYTES} bytes after the last clock mark"
                break
        # No basic.cancel: pika would reject what it holds, and RabbitMQ before 4.3 puts a rejected message behind
        # those waiting. What was delivered after the last mark goes back when the broker closes the connection.
        return self.done

    def _idle_stop(self, after_own: bool, delivered: int, late: bool) -> str:
        if after_own and not self.held:
            return "the journal is empty"
        if delivered >= self.limits.max_messages:
            return f"max_messages ({self.limits.max_messages}) delivered"
        if late:
            return f"the run's last clock mark did not come through within {self.limits.grace}s"
        return ""

    def _mark(self) -> int:
        at = publish_mark(self.marks)
        self.own.add(at)
        return at

    def _take(self, method: Any, props: Any, body: bytes, final: int | None) -> tuple[bool, bool]:
        """Take one delivery; returns (stop here, it was one of this run's marks)."""
        try:
            trace = read_trace(headers_of(props), body)
        except TraceMessageError as exc:
            log.warning("journal of %s: delivery %d is not a firehose trace (%s); it is dropped once the archive "
                        "is stored", self.vhost, method.delivery_tag, exc)
            self.held_foreign.append(method.delivery_tag)
            return False, False
        mark = trace.clock_ms
        if mark is None and trace.went_nowhere:
            self.held_nowhere += 1
            return False, False
        if mark is None:
            if self.bound is None:
                self.done.records_before_first_mark = True
            record = trace.record(self.vhost, 0, bool(method.redelivered), self.bound or 0)
            self.held.append(record)
            self.held_bytes += len(body) + 512
            return False, False
        if trace.starts and self.bound is not None:
            low, high = sorted((self.bound, mark))
            self.done.gaps.append({"from": low, "to": high, "reason": "the journal was started again (`rbak journal "
                                   "enable` after it was disabled, or its queue deleted): publishes made while it was "
                                   "off may be missing"})
        self._settle(mark, method.delivery_tag)
        return mark == final, mark in self.own

    def _settle(self, mark: int, tag: int) -> None:
        """A mark was read: everything held before it is stored; the run may now stop here."""
        done = self.done
        for record in self.held:
            done.messages += 1
            done.redelivered += record.redelivered
            self.store(replace(record, delivery_tag=done.messages))
        done.foreign += self.held_foreign
        done.went_nowhere += self.held_nowhere
        self.held, self.held_bytes, self.held_foreign, self.held_nowhere = [], 0, [], 0
        if done.first_seen_mark is None:
            done.first_seen_mark = mark
        done.last_mark, done.last_mark_tag = mark, tag
        self.bound = mark
