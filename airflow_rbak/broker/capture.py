"""Non-destructive capture of classic and quorum queues over AMQP.

How it works, and why:

* Every message present at the start (the passive-declare depth, the
  *target*) is consumed without ack and staged as it arrives; memory holds
  one staging chunk, never the queue.
* Consumer *k* gets prefetch ``min(window, target - already requested)``.
  Without acks a consumer gets exactly its prefetch and then nothing
  (FIELD-NOTES), so the prefetches add up to the target, every message
  goes to exactly one consumer, the total never exceeds the target, and
  neither the 16-bit prefetch nor the quorum default of 2,000 caps the
  depth. The consumers form a staircase: *k+1* opens only when *k* is
  full, so each holds one run of the queue (quorum returns go back per
  consumer) and the client never has more than one window in flight.
  Opening a classic queue's consumers all at once let the broker push the
  whole queue at the client, which buffered it (measured: 95-190 MiB of
  client memory for 200,000 messages of 32 bytes, against 18 MiB for the
  staircase, which was also no slower).
* At the end every consumer is cancelled first (nothing can be delivered
  to us any more), then everything goes back in order, by ``basic.nack``
  or by closing the consuming channels (:mod:`.returns` says which, and
  why), and the capture waits until the queue's depth shows them back.
  Quorum queues count every return toward ``x-delivery-count``; where a
  delivery limit is in force the capture is refused before the first
  message, unless explicitly allowed (:mod:`.returns`).
"""

from __future__ import annotations

import hashlib
import logging
import time
from dataclasses import dataclass

import orjson
import pika
import pika.exceptions
from pika.adapters.blocking_connection import BlockingChannel

from airflow_rbak.broker import amqp_types
from airflow_rbak.broker.amqp_client import CONNECTION_ERRORS, close_quietly, open_connection
from airflow_rbak.broker.capture_limits import Deadline, drained_by_others, management_counts
from airflow_rbak.broker.checkpoints import CheckpointStore, QueueProgress
from airflow_rbak.broker.connection import RabbitMQConnection
from airflow_rbak.broker.delivery_json import delivery_record_json
from airflow_rbak.broker.discovery import QueueInfo, describe_queue
from airflow_rbak.broker.errors import (
    CaptureIntegrityError, CaptureInterruptedError, CaptureStalledError, ConsumerTimeoutError, DeliveryLimitRiskError,
    QueueNotFoundError, UnsafeQueueError,
)
from airflow_rbak.broker.management import ManagementClient
from airflow_rbak.broker.queue_features import (
    DEFAULT_CONSUMER_TIMEOUT_MS, CaptureMethod, Facts, QueueDecision, consumer_timeout_ms, decide,
)
from airflow_rbak.broker.returns import CONSUMERS_PER_CHANNEL
from airflow_rbak.broker.staging import StagedChunk, StagingWriter
from airflow_rbak.codec.constants import Compression
from airflow_rbak.codec.records import BackupRecord
from airflow_rbak.exceptions import ConfigurationError
from airflow_rbak.storage.base import Storage

log = logging.getLogger(__name__)
MAX_PREFETCH = 65535
#: Broker-owned headers that are state, not part of the published message.
QUORUM_BROKER_HEADERS = frozenset({"x-delivery-count"})


@dataclass(frozen=True)
class CaptureOptions:
    """How to capture; validated at construction."""

    backup_id: str
    compression: Compression = Compression.ZSTD
    chunk_max_records: int = 5000
    chunk_max_bytes: int = 8 * 1024 * 1024
    #: Unacked messages per consumer (the staircase step), 1-65535. The largest by default: on a quorum queue each
    #: further consumer waits for the broker to register it through its Raft log (0.1-0.5 s measured on 3.10).
    window: int = MAX_PREFETCH
    #: Back up quorum queues whose returns count toward a delivery limit.
    allow_delivery_count_increase: bool = False
    #: Seconds without a delivery before the queue is checked for having been drained by someone else.
    idle_timeout: float = 15.0
    #: Idle checks that cannot tell a drained quorum queue from a slow one before the capture gives up.
    inconclusive_checks: int = 4
    #: A queue that cannot be captured without changing it: "skip" leaves it out (named, with its reason), "fail" fails.
    on_unsafe_queue: str = "skip"
    #: The broker's ``consumer_timeout`` (rabbitmq.conf), unless the queue sets its own.
    consumer_timeout_ms: int = DEFAULT_CONSUMER_TIMEOUT_MS

    def __post_init__(self) -> None:
        if not 1 <= self.window <= MAX_PREFETCH:
            raise ConfigurationError(f"window must be 1-{MAX_PREFETCH} (AMQP prefetch is 16-bit), got {self.window}")
        if self.idle_timeout <= 0 or self.inconclusive_checks < 0:
            raise ConfigurationError("idle_timeout must be > 0 and inconclusive_checks >= 0")
        if self.on_unsafe_queue not in ("skip", "fail"):
            raise ConfigurationError(f"on_unsafe_queue must be 'skip' or 'fail', got {self.on_unsafe_queue!r}")
        if self.consumer_timeout_ms < 1000:
            raise ConfigurationError(f"consumer_timeout_ms must be at least 1000, got {self.consumer_timeout_ms}")
        object.__setattr__(self, "compression", Compression.parse(self.compression))


@dataclass(frozen=True)
class CaptureResult:
    """What one capture did; JSON-friendly."""

    vhost: str
    queue: str
    queue_type: str
    messages: int
    bytes: int
    staged_chunks: int
    duration_s: float
    target: int
    resumed_from: int = 0
    skipped_completed: bool = False
    depth_after: int | None = None
    first_offset: int | None = None
    last_offset: int | None = None
    #: Streams: SHA-256 of the message at ``last_offset``, so the next backup can tell the stream was re-created.
    last_fingerprint: str | None = None
    consumer_offsets: dict[str, int] | None = None
    #: Seconds spent returning the messages and waiting until the queue's depth shows them back (the broker
    #: re-enqueues asynchronously; the last chunk is stored meanwhile). Included in ``duration_s``.
    return_wait_s: float = 0.0
    #: Why the queue was left out (nothing was read from it), or None.
    left_out: str | None = None
    #: How it was read (:class:`~airflow_rbak.broker.queue_features.CaptureMethod`).
    method: str | None = None


def fingerprint(record: BackupRecord) -> str:
    """Identity of a message independent of delivery state (tag, redelivered, capture time).

    Headers count in key order: a quorum queue (3.10) re-encodes a returned message's header table sorted by
    key when it adds ``x-delivery-count``, so the message a resumed capture receives again has the same headers
    in another order.
    """
    h = hashlib.sha256(record.body)
    headers = sorted(record.headers, key=lambda pair: pair[0])
    h.update(orjson.dumps([record.properties.to_json(), [[k, v.to_json()] for k, v in headers]]))
    h.update(f"{record.exchange}\0{record.routing_key}".encode())
    return h.hexdigest()[:32]


class QueueCapture:
    """Captures one classic or quorum queue into staging, resumably."""

    def __init__(
        self,
        connection: RabbitMQConnection,
        storage: Storage,
        checkpoints: CheckpointStore,
        options: CaptureOptions,
    ) -> None:
        self.connection = connection
        self.storage = storage
        self.checkpoints = checkpoints
        self.options = options

    def capture(self, info: QueueInfo, broker_version: str) -> CaptureResult:
        """Capture every message present at the start, return them all, and report."""
        opts, started = self.options, time.monotonic()
        done = self.checkpoints.get(opts.backup_id, info.vhost, info.name)
        if done is not None and done.completed:
            return _result_from(done, 0.0, skipped=True)
        info, decision = self.decide(info, broker_version)
        if decision.reason is not None:
            return self._leave_out(info, decision.reason)
        conn = open_connection(self.connection, info.vhost)
        run: _Run | None = None
        try:
            run = _Run(self, conn, info, decision, done)
            try:
                run.consume()
            finally:
                run.give_back()
            # The broker re-enqueues while the last chunk is written; the depth check then confirms it.
            run.finish_staging()
            depth_after = run.settled_depth()
        except CONNECTION_ERRORS as exc:
            if run is not None:
                run.writer.close()  # the chunk being stored commits its checkpoint first
                run.raise_if_timed_out(exc)
            raise CaptureInterruptedError(
                f"capture of {info.queue_type} queue {info.name!r} in vhost {info.vhost!r} was interrupted "
                f"({type(exc).__name__}) after {run_staged(self, info)} staged messages. No message was removed: "
                "unacknowledged messages go back to the queue when the connection drops. Re-run the same backup_id "
                "to resume."
            ) from None
        finally:
            if run is not None:
                run.writer.close()
            close_quietly(conn)
        return run.result(time.monotonic() - started, depth_after)

    def decide(self, info: QueueInfo, broker_version: str) -> tuple[QueueInfo, QueueDecision]:
        """The queue as it is now, not as discovery saw it (a policy may have changed since), and what to do with it."""
        try:
            with ManagementClient(self.connection) as client:
                info = describe_queue(client, info.vhost, info.name)
        except QueueNotFoundError:
            return info, QueueDecision(CaptureMethod.LEAVE_OUT, "the queue no longer exists (deleted since discovery)")
        return info, decide(info, Facts(broker_version, self.options.allow_delivery_count_increase))

    def _leave_out(self, info: QueueInfo, reason: str) -> CaptureResult:
        """Leave a queue out before its first message is received (or fail, under ``on_unsafe_queue=fail``)."""
        what = f"{info.queue_type} queue {info.name!r} in vhost {info.vhost!r}"
        if self.options.on_unsafe_queue == "fail":
            raise UnsafeQueueError(f"{what} cannot be backed up without changing it: {reason}. Nothing was read from it; "
                                   "set on_unsafe_queue=skip to back up the other queues without it")
        log.warning("%s is left out of backup %s: %s. Nothing was read from it", what, self.options.backup_id, reason)
        return CaptureResult(vhost=info.vhost, queue=info.name, queue_type=info.queue_type, messages=0, bytes=0,
                             staged_chunks=0, duration_s=0.0, target=0, left_out=reason, method=CaptureMethod.LEAVE_OUT.value)


def run_staged(capture: QueueCapture, info: QueueInfo) -> int:
    progress = capture.checkpoints.get(capture.options.backup_id, info.vhost, info.name)
    return progress.staged_records if progress else 0


def _result_from(p: QueueProgress, duration: float, skipped: bool = False) -> CaptureResult:
    return CaptureResult(
        vhost=p.vhost, queue=p.queue, queue_type=p.queue_type, messages=p.staged_records, bytes=p.staged_bytes,
        staged_chunks=p.last_chunk, duration_s=duration, target=p.target_count, skipped_completed=skipped,
        first_offset=p.stream_start_offset, last_offset=p.stream_end_offset,
    )


def _management_ready(connection: RabbitMQConnection, info: QueueInfo) -> int | None:
    """Ready messages by the management API (sampled, a few seconds old); None when it has no figure."""
    counts = management_counts(connection, info)
    return None if counts is None else counts[0]


def _delivery_count(props: pika.spec.BasicProperties) -> int:
    for key, value in amqp_types.headers_of(props):
        if key == "x-delivery-count" and isinstance(value.value, int):
            return int(value.value)
    return 0


class _Run:
    """One pass over a queue: consume the staircase, stage, give everything back."""

    def __init__(self, owner: QueueCapture, conn: pika.BlockingConnection, info: QueueInfo, decision: QueueDecision,
                 progress: QueueProgress | None) -> None:
        assert decision.return_plan is not None
        self.opts, self.checkpoints, self.conn, self.info = owner.options, owner.checkpoints, conn, info
        self.method, self.plan = decision.method, decision.return_plan
        self.connection = owner.connection
        self.deadline = Deadline(consumer_timeout_ms(info, self.opts.consumer_timeout_ms))
        self.inconclusive = 0
        self.channel = conn.channel()
        if progress is None:
            progress = QueueProgress(self.opts.backup_id, info.vhost, info.name, info.queue_type, target_count=self.initial_depth())
            # Committed locally only: the first chunk's checkpoint uploads it, and before that there is nothing to resume.
            self.checkpoints.save(progress, sync=False)
        self.progress = progress
        self.target, self.skip = progress.target_count, progress.staged_records
        self.staged, self.staged_bytes = progress.staged_records, progress.staged_bytes
        self.received = self.requested = 0
        self.return_wait_s = 0.0
        #: (channel, consumer tag, prefetch) in opening order; ``channels`` are those opened for "close".
        self.consumers: list[tuple[BlockingChannel, str, int]] = []
        self.cancelled: set[str] = set()
        self.channels: list[BlockingChannel] = []
        #: The highest delivery tag received (tags count up per channel; a nack with ``multiple`` returns all before it).
        self.last_tag = 0
        self.watch_limit = self.plan.counts and self.plan.limit is not None
        #: The last staged delivery, for the checkpoint's fingerprint (a record is built once per chunk, not per message).
        self.last_delivery: tuple[pika.spec.Basic.Deliver, pika.spec.BasicProperties, bytes] | None = None
        self.risk: str | None = None
        self.stopping = False
        self.drop = QUORUM_BROKER_HEADERS if info.queue_type == "quorum" else frozenset()
        self.writer = StagingWriter(
            owner.storage, self.opts.backup_id, info.vhost, info.name, next_sequence=progress.last_chunk + 1,
            compression=self.opts.compression, max_records=self.opts.chunk_max_records,
            max_bytes=self.opts.chunk_max_bytes, on_chunk=self._on_chunk, seal_state=self._seal_state, background=True,
        )

    def depth(self) -> int:
        """Ready messages now (exact, unlike the management API's sampled figure)."""
        return int(self.channel.queue_declare(self.info.name, passive=True).method.message_count)

    def initial_depth(self) -> int:
        """The target: the exact ready count over AMQP, except where RabbitMQ 3.10 misreports it.

        3.10 answers 0 for a quorum queue whose count query times out (measured: for minutes after repeated
        returns of 50,000+ messages). A 0 the management API contradicts is re-read briefly, then replaced by
        the management API's ready count (sampled, so a few seconds old: too high ends in the idle check,
        which settles on what was received), never taken as an empty queue.
        """
        depth = self.depth()
        if depth or self.info.queue_type != "quorum":
            return depth
        reported = _management_ready(self.connection, self.info)
        deadline = time.monotonic() + 10.0  # no figure yet: the management API samples every 5 s
        while reported is None and time.monotonic() < deadline:
            time.sleep(0.5)
            if depth := self.depth():
                return depth
            reported = _management_ready(self.connection, self.info)
        deadline = time.monotonic() + min(self.opts.idle_timeout, 3.0)
        while reported and time.monotonic() < deadline:
            time.sleep(0.5)
            if depth := self.depth():
                return depth
        if reported is None:
            raise CaptureStalledError(
                f"quorum queue {self.info.name!r} in vhost {self.info.vhost!r} reports 0 messages over AMQP and the "
                "management API has no count for it: cannot tell whether it is empty. Nothing was read; re-run later")
        if reported:
            log.warning("quorum queue %r in vhost %r reports 0 ready messages over AMQP but %d in the management API; "
                        "capturing by the management API's count", self.info.name, self.info.vhost, reported)
        return reported

    def await_depth(self, expected: int, wait: float) -> int:
        """Poll the exact depth until it reaches ``expected`` or ``wait`` seconds pass; return the last answer."""
        deadline = time.monotonic() + wait
        depth = self.depth()
        while depth < expected and time.monotonic() < deadline:
            time.sleep(0.02)
            depth = self.depth()
        return depth

    def settled_depth(self, wait: float | None = None) -> int:
        """Depth after the return; quorum queues apply returns asynchronously (and may answer 0, see
        :meth:`initial_depth`), so wait, then ask the management API.

        A busy broker re-enqueues tens of thousands of returns slowly (measured on 3.10 at load 8: 12,256 of
        70,000 after 20 s), so the wait grows with the number returned, up to two minutes; it ends as soon as
        the depth is back. The figure is a report: the messages are back either way.
        """
        if wait is None:
            wait = min(10.0 + self.target / 1000, 120.0)
        started = time.monotonic()
        depth = self.await_depth(self.target, wait)
        # The management API's figure is sampled every few seconds: give it one more interval to catch up.
        deadline = time.monotonic() + wait
        while depth < self.target and self.info.queue_type == "quorum" and time.monotonic() < deadline:
            depth = max(depth, _management_ready(self.connection, self.info) or 0)
            if depth < self.target:
                time.sleep(1.0)
        self.return_wait_s += time.monotonic() - started
        return depth

    def _consumer_channel(self) -> BlockingChannel:
        if self.plan.method == "nack":
            return self.channel
        if len(self.consumers) % CONSUMERS_PER_CHANNEL == 0:
            self.channels.append(self.conn.channel())
        return self.channels[-1]

    def _open_consumer(self) -> None:
        if self.method is CaptureMethod.ONE_CONSUMER_AT_A_TIME and self.consumers:
            # Only one consumer of a single-active-consumer queue receives: the full one steps aside (keeping its
            # messages) so that the next becomes active.
            channel, tag, _step = self.consumers[-1]
            channel.basic_cancel(tag)
            self.cancelled.add(tag)
        step = min(self.opts.window, self.target - self.requested)
        channel = self._consumer_channel()
        channel.basic_qos(prefetch_count=step)
        tag = channel.basic_consume(self.info.name, self._on_message, auto_ack=False, consumer_tag=f"rbak-{len(self.consumers) + 1:05d}")
        self.consumers.append((channel, tag, step))
        self.requested += step

    def consume(self) -> None:
        """Receive ``target`` messages (staging those past a resumed run's ``skip``)."""
        if self.method is CaptureMethod.GET:
            self._consume_by_get()
        idle_since = time.monotonic()
        while self.received < self.target and self.risk is None:
            while self.requested < self.target and self.received == self.requested:
                self._open_consumer()
            before = self.received
            self.conn.process_data_events(time_limit=0.25)
            now = time.monotonic()
            if self.received != before:
                idle_since = now
                self.deadline.start()
            elif now - idle_since > self.opts.idle_timeout:
                self._on_idle()
                idle_since = now
            self._check_time()
        if self.risk is not None:
            raise DeliveryLimitRiskError(self.risk)

    def _consume_by_get(self) -> None:
        """Read with ``basic.get``, which registers no consumer (auto-delete and single-active-consumer queues).

        An empty answer is the broker's own, exact: the queue holds nothing more for this capture.
        """
        while self.received < self.target and self.risk is None:
            method, props, body = self.channel.basic_get(self.info.name, auto_ack=False)
            if method is None:
                self._drained()
                return
            self.deadline.start()
            self._on_message(self.channel, method, props, body)
            if self.received % 1000 == 0:
                self._check_time()

    def _check_time(self) -> None:
        """Stop before the broker's consumer timeout could close a channel that holds messages."""
        if (why := self.deadline.exceeded(self.received, self.target)) is not None:
            raise ConsumerTimeoutError(self._timeout_message(f"the capture {why}; it stopped and gave every message back"))

    def _timeout_message(self, what: str) -> str:
        return (f"{self.info.queue_type} queue {self.info.name!r} in vhost {self.info.vhost!r}: {what} after {self.received} "
                f"of {self.target} messages. No message was removed, and the queue is not marked complete. A capture "
                "holds every message until it gives them all back, so it must finish within the broker's "
                "consumer_timeout: raise it (rabbitmq.conf consumer_timeout; x-consumer-timeout or a consumer-timeout "
                "policy from RabbitMQ 3.12) and set consumer_timeout_ms to the broker's value")

    def raise_if_timed_out(self, exc: BaseException) -> None:
        """After a channel error: a consumer timeout says so, and what to do (the broker returned the messages).

        pika raises a broker's ``channel.close`` from ``process_data_events`` (or the next call on the channel).
        """
        if isinstance(exc, pika.exceptions.ChannelClosedByBroker) and "timed out" in str(exc.reply_text):
            raise ConsumerTimeoutError(self._timeout_message(
                f"the broker closed the capture's channel ({exc.reply_code} {exc.reply_text})")) from None

    def _drained(self) -> None:
        log.warning("queue %r in vhost %r was drained by another consumer during capture; %d of %d captured",
                    self.info.name, self.info.vhost, self.received, self.target)
        self.target = self.received

    def _on_idle(self) -> None:
        """No delivery for ``idle_timeout``: drained by someone else, or a broker that is slow to answer?"""
        depth = self.depth()
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
            "nothing was marked complete; re-run the same backup_id to resume"
        )

    def _on_message(self, _ch: object, method: pika.spec.Basic.Deliver, props: pika.spec.BasicProperties, body: bytes) -> None:
        """Stage one delivery (runs once per message: keep it lean)."""
        self.received += 1
        self.last_tag = method.delivery_tag
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
        self.writer.add(
            delivery_record_json(method, props, body, queue=self.info.name, vhost=self.info.vhost, backed_up_at=now_ms,
                                 drop_headers=self.drop),
            now_ms,
        )

    def _reaches_limit(self, props: pika.spec.BasicProperties) -> bool:
        """Whether returning this message would bring it to the delivery limit; if so, stop (``risk``)."""
        count = _delivery_count(props)
        if self.plan.limit is None or count + 1 < self.plan.limit:
            return False
        self.risk = (
            f"stopped the backup of quorum queue {self.info.name!r} in vhost {self.info.vhost!r}: message "
            f"{self.received} has x-delivery-count {count}, and returning it again would bring it "
            f"to the queue's delivery limit of {self.plan.limit}. The messages were returned; this queue cannot "
            "be backed up safely by consume-and-return until its messages are consumed or the limit is raised."
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
        record = amqp_types.record_from_delivery(method, props, body, queue=self.info.name, vhost=self.info.vhost,
                                                 backed_up_at=0, drop_headers=self.drop)
        return fingerprint(record)

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
            self._close_in_order()
        elif self.last_tag and self.channel.is_open:  # "nack": every consumer is on this channel
            self.channel.basic_nack(self.last_tag, multiple=True, requeue=True)
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

    def _close_in_order(self) -> None:
        """Close the consuming channels one by one; each waits until the previous one's messages are back.

        The broker returns a closed channel's messages when it sees the channel's process end, and two
        channels' ends carry no order between them: without the wait a later group could queue first.
        """
        base = self.depth() if len(self.channels) > 1 else 0
        returned = 0
        for n, channel in enumerate(self.channels):
            returned += sum(step for ch, _tag, step in self.consumers if ch is channel)
            if channel.is_open:
                channel.close()
            if n + 1 < len(self.channels) and self.await_depth(base + returned, 10.0) < base + returned:
                log.warning("queue %r in vhost %r: returned messages of consumer group %d not visible after 10s; "
                            "returning the next group anyway", self.info.name, self.info.vhost, n + 1)

    def result(self, duration: float, depth_after: int) -> CaptureResult:
        return CaptureResult(
            vhost=self.info.vhost, queue=self.info.name, queue_type=self.info.queue_type, messages=self.staged,
            bytes=self.staged_bytes, staged_chunks=self.progress.last_chunk, duration_s=round(duration, 3),
            target=self.target, resumed_from=self.skip, depth_after=depth_after, return_wait_s=round(self.return_wait_s, 3),
            method=self.method.value,
        )
