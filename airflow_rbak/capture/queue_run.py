"""One pass over a classic or quorum queue: read it the way its features allow, stage, give everything back.

See :mod:`airflow_rbak.capture.queue_capture` for the design and the measurements behind it.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import pika
import pika.exceptions
import pika.frame
from pika.adapters.blocking_connection import BlockingChannel

from airflow_rbak.broker import amqp_types
from airflow_rbak.broker.amqp_client import CONNECTION_ERRORS
from airflow_rbak.broker.discovery import QueueInfo
from airflow_rbak.capture.capture_options import CaptureOwner, CaptureResult, Deadline, drained_by_others, management_counts
from airflow_rbak.capture.checkpoints import QueueProgress
from airflow_rbak.capture.errors import (
    CaptureIntegrityError,
    CaptureInterruptedError,
    CaptureStalledError,
    ConsumerTimeoutError,
    DeliveryLimitRiskError,
    HoldLimitError,
)
from airflow_rbak.capture.message_identity import fingerprint, identity
from airflow_rbak.capture.queue_depth import QueueDepth
from airflow_rbak.capture.queue_features import CaptureMethod, QueueDecision, consumer_timeout_ms
from airflow_rbak.capture.staged_delivery import stage_delivery
from airflow_rbak.codec.staged_records import DROPPED_HEADERS, dropped_code
from airflow_rbak.display import package_logger
from airflow_rbak.repository.staging import StagedChunk, StagingWriter

log = package_logger(__name__)


def _delivery_count(props: pika.spec.BasicProperties) -> int:
    for key, value in amqp_types.headers_of(props):
        if key == "x-delivery-count" and isinstance(value.value, int):
            return int(value.value)
    return 0


class QueueRun:
    """One pass over a queue: consume the staircase, stage, give everything back."""

    def __init__(self, owner: CaptureOwner, conn: pika.BlockingConnection, info: QueueInfo, decision: QueueDecision,
                 progress: QueueProgress | None) -> None:
        assert decision.return_plan is not None
        self.opts, self.checkpoints, self.conn, self.info = owner.options, owner.checkpoints, conn, info
        self.method, self.plan = decision.method, decision.return_plan
        self.connection = owner.connection
        timeout_ms, cap_ms = consumer_timeout_ms(info, self.opts.consumer_timeout_ms), self.opts.max_hold_ms
        #: Whether the user's ``max_hold_ms``, not the broker's consumer timeout, bounds how long messages are held.
        self.hold_capped = cap_ms is not None and cap_ms < timeout_ms
        self.deadline = Deadline(cap_ms, bound="max_hold_ms") if cap_ms is not None and self.hold_capped else Deadline(timeout_ms)
        self.inconclusive = 0
        self.channel_closed_by_broker = False
        #: The tag of a consumer the broker cancelled (from RabbitMQ 4.3 its consumer timeout on a quorum queue cancels
        #: the consumer and takes its messages back, leaving the channel open).
        self.cancelled_by_broker: str | None = None
        #: For depth queries only: the messages are held on ``channels``, so that closing those can return them.
        self.channel = conn.channel()
        self.depths = QueueDepth(self.channel, owner.connection, info, self.opts.idle_timeout)
        if progress is None:
            progress = QueueProgress(
                self.opts.backup_id, info.vhost, info.name, info.queue_type, target_count=self.depths.initial()
            )
            # Committed locally only: the first chunk's checkpoint uploads it, and before that there is nothing to resume.
            self.checkpoints.save(progress, sync=False)
        self.progress = progress
        #: The ready messages when the capture (its first run) started: the report's measure of "completed short".
        self.depth_at_start = progress.target_count
        self.target, self.skip = progress.target_count, progress.staged_records
        self.staged, self.staged_bytes = progress.staged_records, progress.staged_bytes
        self.received = self.requested = 0
        self.return_wait_s = 0.0
        #: (channel, consumer tag, prefetch) in opening order; ``channels`` hold the messages, in opening order.
        self.consumers: list[tuple[BlockingChannel, str, int]] = []
        self.cancelled: set[str] = set()
        self.channels: list[BlockingChannel] = []
        self.watch_limit = self.plan.counts and self.plan.limit is not None
        #: The last staged delivery, for the checkpoint's fingerprint (a record is built once per chunk, not per message).
        self.last_delivery: tuple[pika.spec.Basic.Deliver, pika.spec.BasicProperties, bytes] | None = None
        self.risk: str | None = None
        self.stopping = False
        #: The headers the broker adds on delivery from this queue (its state, not the message's): never stored, never
        #: part of the resume fingerprint.
        self.dropped = dropped_code(info.queue_type)
        self.drop = DROPPED_HEADERS[self.dropped]
        self.writer = StagingWriter(
            owner.storage, self.opts.backup_id, info.vhost, info.name, next_sequence=progress.last_chunk + 1,
            compression=self.opts.compression, max_records=self.opts.chunk_max_records,
            max_bytes=self.opts.chunk_max_bytes, on_chunk=self._on_chunk, seal_state=self._seal_state, background=True,
        )

    def settled_depth(self) -> int:
        """Depth after the return (:meth:`.QueueDepth.settled`), its wait counted in the report's ``return_wait_s``."""
        started = time.monotonic()
        depth = self.depths.settled(self.target)
        self.return_wait_s += time.monotonic() - started
        return depth

    def _holding_channel(self) -> BlockingChannel:
        """The channel the next consumer (or ``basic.get``) receives on: a new one once the last holds enough consumers."""
        per_channel = self.plan.consumers_per_channel
        if not self.channels or (per_channel is not None and len(self.consumers) >= per_channel * len(self.channels)):
            channel = self.conn.channel()
            channel.add_on_cancel_callback(self._on_broker_cancel)
            self.channels.append(channel)
        return self.channels[-1]

    def _on_broker_cancel(self, frame: pika.frame.Method) -> None:
        self.cancelled_by_broker = self.cancelled_by_broker or str(frame.method.consumer_tag)

    def _open_consumer(self) -> None:
        if self.method is CaptureMethod.ONE_CONSUMER_AT_A_TIME and self.consumers:
            # Only one consumer of a single-active-consumer queue receives: the full one steps aside (keeping its
            # messages) so that the next becomes active.
            channel, tag, _step = self.consumers[-1]
            channel.basic_cancel(tag)
            self.cancelled.add(tag)
        # The broker's timer starts at a delivery, never before the consumer exists: starting here counts no less
        # than the broker does, even when staging holds the consuming thread inside a delivery callback.
        self.deadline.start()
        step = min(self.opts.window, self.target - self.requested)
        channel = self._holding_channel()
        channel.basic_qos(prefetch_count=step)
        tag = channel.basic_consume(
            self.info.name, self._on_message, auto_ack=False, consumer_tag=f"rbak-{len(self.consumers) + 1:05d}"
        )
        self.consumers.append((channel, tag, step))
        self.requested += step

    def consume(self) -> None:
        """Receive ``target`` messages (staging those past a resumed run's ``skip``)."""
        try:
            self._consume()
        except CONNECTION_ERRORS:
            # Before the return closes channels of its own: was a consuming channel closed under an open connection?
            self.channel_closed_by_broker = self.conn.is_open and any(
                channel.is_closed for channel in [self.channel, *self.channels])
            raise

    def _consume(self) -> None:
        if self.method is CaptureMethod.GET:
            self._consume_by_get()
        idle_since = time.monotonic()
        while self.received < self.target and self.risk is None:
            while self.requested < self.target and self.received == self.requested:
                self._open_consumer()
            before = self.received
            self.conn.process_data_events(time_limit=0.25)
            self._raise_if_a_holding_channel_closed()
            self._raise_if_a_consumer_was_cancelled()
            now = time.monotonic()
            if self.received != before:
                idle_since = now
            elif now - idle_since > self.opts.idle_timeout:
                self._on_idle()
                idle_since = now
            self._check_time()
        if self.risk is not None:
            raise DeliveryLimitRiskError(self.risk)

    def _raise_if_a_holding_channel_closed(self) -> None:
        """pika raises a broker's ``channel.close`` only from a call on that channel, and none is made while consuming."""
        if any(channel.is_closed for channel in self.channels):
            raise pika.exceptions.ChannelWrongStateError("a channel holding captured messages was closed")

    def _raise_if_a_consumer_was_cancelled(self) -> None:
        """A consumer the broker cancelled has lost its messages to the queue, which would deliver them again.

        Only a quorum queue's consumer is cancelled for holding messages too long (RabbitMQ 4.3; a classic queue's
        timeout closes the channel instead). A classic queue cancels its consumers when it goes away: its node
        stopped (a restart, a rolling upgrade) or it was deleted. That is an interruption the task's retry resumes,
        not a timeout the user must configure away, which would stop the retries of a scheduled backup."""
        if self.cancelled_by_broker is None:
            return
        held = time.monotonic() - (self.deadline.started or time.monotonic())
        if self.info.queue_type != "quorum":
            raise CaptureInterruptedError(
                f"capture of {self.info.queue_type} queue {self.info.name!r} in vhost {self.info.vhost!r} was "
                f"interrupted after {self.received} of {self.target} messages: the broker cancelled the capture's "
                f"consumer {self.cancelled_by_broker} after {held:.0f} s, as it does when the queue's node stops or "
                "the queue is deleted. No message was removed: the queue keeps the messages the capture held. Re-run "
                "the same backup_id to resume once the queue's node is running.")
        raise ConsumerTimeoutError(self._timeout_message(
            f"the broker cancelled the capture's consumer {self.cancelled_by_broker} and took its messages back after "
            f"the capture had held messages for {held:.0f} s (RabbitMQ 4.3 does so when a quorum queue's consumer "
            "timeout passes; a deleted queue cancels its consumers too); the capture stopped and gave every "
            "message back"))

    def _consume_by_get(self) -> None:
        """Read with ``basic.get``, which registers no consumer (auto-delete and single-active-consumer queues).

        An empty answer is the broker's own, exact: the queue holds nothing more for this capture.
        """
        self.deadline.start()
        channel = self._holding_channel()
        while self.received < self.target and self.risk is None:
            method, props, body = channel.basic_get(self.info.name, auto_ack=False)
            if method is None:
                self._drained()
                return
            self._on_message(channel, method, props, body)
            if self.received % 1000 == 0:
                self._check_time()

    def _check_time(self) -> None:
        """Stop before the broker's consumer timeout could close a channel that holds messages."""
        if (why := self.deadline.exceeded(self.received, self.target)) is None:
            return
        if self.hold_capped:
            raise HoldLimitError(
                f"{self.info.queue_type} queue {self.info.name!r} in vhost {self.info.vhost!r}: the capture {why}; it "
                f"stopped after {self.received} of {self.target} messages and gave every message back. No message was "
                "removed, and the queue is not marked complete. max_hold_ms is the longest a capture may withhold a "
                "queue's messages from its consumers: raise it, or back this queue up when it is shallower")
        raise ConsumerTimeoutError(self._timeout_message(f"the capture {why}; it stopped and gave every message back"))

    def _timeout_message(self, what: str) -> str:
        return (f"{self.info.queue_type} queue {self.info.name!r} in vhost {self.info.vhost!r}: {what} after {self.received} "
                f"of {self.target} messages. No message was removed, and the queue is not marked complete. A capture "
                "holds every message until it gives them all back, so it must finish within the broker's "
                "consumer_timeout: raise it (rabbitmq.conf consumer_timeout; x-consumer-timeout or a consumer-timeout "
                "policy from RabbitMQ 3.12) and set consumer_timeout_ms to the broker's value")

    def raise_if_timed_out(self, exc: BaseException) -> None:
        """After a channel error: a consumer timeout says so, and what to do (the broker returned the messages).

        pika raises a broker's ``channel.close`` only from the next call on that channel; while consuming,
        ``_raise_if_a_holding_channel_closed`` notices it instead.
        """
        if isinstance(exc, pika.exceptions.ChannelClosedByBroker) and "timed out" in str(exc.reply_text):
            raise ConsumerTimeoutError(self._timeout_message(
                f"the broker closed the capture's channel ({exc.reply_code} {exc.reply_text})")) from None
        if self.channel_closed_by_broker and self.deadline.started is not None:
            held = time.monotonic() - self.deadline.started
            raise ConsumerTimeoutError(self._timeout_message(
                f"the broker closed the capture's channel after it had held messages for {held:.0f} s, most likely "
                f"because its consumer_timeout is shorter than consumer_timeout_ms ({self.deadline.timeout_ms} ms)")) from None

    def _drained(self) -> None:
        log.warning("queue %r in vhost %r was drained by another consumer during capture: it completes short, %d "
                    "captured of the %d ready at its start (the others' consumers took the rest)",
                    self.info.name, self.info.vhost, self.received, self.target)
        self.target = self.received

    def _on_idle(self) -> None:
        """No delivery for ``idle_timeout``: drained by someone else, or a broker that is slow to answer?"""
        depth = self.depths.now()
        counts = management_counts(self.connection, self.info) if not depth and self.info.queue_type == "quorum" else None
        if drained_by_others(depth, counts, self.info.queue_type, self.received):
            self._drained()
            return
        if not depth and self.inconclusive < self.opts.inconclusive_checks:
            self.inconclusive += 1
            log.warning("quorum queue %r in vhost %r delivers nothing and reports 0 messages over AMQP, but the "
                        "management API (%s ready, unacked) does not confirm it was drained; waiting",
                        self.info.name, self.info.vhost, counts)
            return
        raise CaptureStalledError(
            f"{self.info.queue_type} queue {self.info.name!r} in vhost {self.info.vhost!r} stopped delivering after "
            f"{self.received} of {self.target} messages (AMQP depth {depth}, management API ready/unacked {counts}), "
            "and the broker's counts cannot tell whether someone else consumed the rest. No message was removed and "
            "nothing was marked complete. Re-run the same backup_id to resume"
        )

    def _on_message(self, _ch: object, method: pika.spec.Basic.Deliver, props: pika.spec.BasicProperties, body: bytes) -> None:
        """Stage one delivery (runs once per message: keep it lean)."""
        self.received += 1
        if self.risk is not None or self.stopping or (self.watch_limit and self._reaches_limit(props)):
            return
        if self.received <= self.skip:
            if self.received == self.skip:
                self._check_resume_point(method, props, body)
            return
        self.staged += 1
        self.staged_bytes += len(body)
        self.last_delivery = (method, props, body)
        now_ms = int(time.time() * 1000)
        self.writer.add(stage_delivery(method, props, body, now_ms, self.dropped), now_ms)

    def _reaches_limit(self, props: pika.spec.BasicProperties) -> bool:
        """Whether this message is too near the delivery limit to be captured again; if so, stop (``risk``).

        Its return makes its count ``count + 1`` and the next capture's ``count + 2``: stop while that would reach the
        limit, so that no capture's return brings a message to it (:meth:`.ReturnPlan.stops_at`)."""
        count = _delivery_count(props)
        if not self.plan.stops_at(count):
            return False
        self.risk = (
            f"stopped the backup of quorum queue {self.info.name!r} in vhost {self.info.vhost!r}: message "
            f"{self.received} has x-delivery-count {count}, and after this backup's return another backup's "
            f"would bring it to the queue's delivery limit of {self.plan.limit}. The messages were returned; this "
            "queue cannot be backed up safely by consume-and-return until its messages are consumed or the limit "
            "is raised."
        )
        return True

    def _check_resume_point(self, method: pika.spec.Basic.Deliver, props: pika.spec.BasicProperties, body: bytes) -> None:
        """A resumed run's last skipped message must be the one the interrupted run staged last."""
        if self.progress.last_fingerprint not in (None, self._fingerprint(method, props, body)):
            raise CaptureIntegrityError(
                f"queue {self.info.name!r} in vhost {self.info.vhost!r} changed since the interrupted run: message "
                f"{self.skip} is not the one staged last. Start a new backup_id."
            )

    def _fingerprint(self, method: pika.spec.Basic.Deliver, props: pika.spec.BasicProperties, body: bytes) -> str:
        return fingerprint(identity(method, props, body, self.drop))

    def _seal_state(self) -> tuple[int, int, str]:
        """The checkpoint of a chunk as it closes: staged so far, and the fingerprint of its last message."""
        assert self.last_delivery is not None
        return self.staged, self.staged_bytes, self._fingerprint(*self.last_delivery)

    def _on_chunk(self, chunk: StagedChunk) -> None:
        """Commit a stored chunk's checkpoint (on the staging thread; chunks arrive in order)."""
        staged, staged_bytes, last_fingerprint = chunk.state
        self.progress = QueueProgress(
            **{**self.progress.__dict__, "staged_records": staged, "staged_bytes": staged_bytes,
               "last_chunk": chunk.sequence, "last_fingerprint": last_fingerprint}
        )
        self.checkpoints.save(self.progress)

    def finish_staging(self) -> None:
        """Store the last chunk and mark the queue complete."""
        self.writer.flush()
        self.progress = QueueProgress(**{**self.progress.__dict__, "target_count": self.target, "completed": True})
        self.checkpoints.save(self.progress)

    def give_back(self) -> None:
        """Cancel every consumer, then return each consumer's messages in order (``ReturnPlan.method``)."""
        if not self.conn.is_open:
            return
        started = time.monotonic()
        self._receive_the_rest()
        for channel, tag, _step in self.consumers:
            if channel.is_open and tag not in self.cancelled:
                channel.basic_cancel(tag)
        if self.plan.method == "close":
            self._return_in_order(lambda channel: channel.close())
        elif self.received:  # "nack": tag 0 with multiple is every message the channel holds
            self._return_in_order(lambda channel: channel.basic_nack(0, multiple=True, requeue=True))
        self.return_wait_s += time.monotonic() - started

    def _receive_the_rest(self, quiet: float = 1.0) -> None:
        """Before cancelling a capture that stops early (an error, a limit), let the requested deliveries arrive.

        pika rejects one by one the deliveries it holds undispatched when a consumer is cancelled; a quorum
        queue would put those back ahead of the earlier messages returned in bulk, changing the queue's
        order. Received here, they are only noted, and go back with the rest, in order.
        """
        self.stopping = True
        idle_since = time.monotonic()
        while self.received < self.requested and time.monotonic() - idle_since < quiet:
            before = self.received
            self.conn.process_data_events(time_limit=0.1)
            if self.received != before:
                idle_since = time.monotonic()

    def _return_in_order(self, give_back: Callable[[BlockingChannel], None]) -> None:
        """Give back the holding channels' messages one channel at a time (``give_back``: close it, or nack all it
        holds); each waits until the previous one's messages are back.

        The broker returns a closed channel's messages when it sees the channel's process end, and two
        channels' ends (or nacks) carry no order between them: without the wait a later group could queue first.
        """
        base = self.depths.now() if len(self.channels) > 1 else 0
        returned = 0
        for n, channel in enumerate(self.channels):
            returned += sum(step for ch, _tag, step in self.consumers if ch is channel)
            if channel.is_open:
                give_back(channel)
            if n + 1 < len(self.channels) and self.depths.reaches(base + returned, 10.0) < base + returned:
                log.warning("queue %r in vhost %r: returned messages of consumer group %d not visible after 10s; "
                            "returning the next group anyway", self.info.name, self.info.vhost, n + 1)

    def result(self, duration: float, depth_after: int) -> CaptureResult:
        return CaptureResult(
            vhost=self.info.vhost, queue=self.info.name, queue_type=self.info.queue_type, messages=self.staged,
            bytes=self.staged_bytes, staged_chunks=self.progress.last_chunk, duration_s=round(duration, 3),
            target=self.target, resumed_from=self.skip, depth_after=depth_after, return_wait_s=round(self.return_wait_s, 3),
            method=self.method.value, depth_at_start=self.depth_at_start,
        )
