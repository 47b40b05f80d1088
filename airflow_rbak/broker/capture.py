"""Non-destructive capture of classic and quorum queues over AMQP.

How it works, and why:

* Every message present at the start (the passive-declare depth, the
  *target*) is consumed without ack and staged as it arrives; memory holds
  one staging chunk, never the queue.
* Consumers form a staircase: consumer *k* gets prefetch
  ``min(window, target - already requested)``. Without acks a consumer gets
  exactly its prefetch and then nothing (FIELD-NOTES), so consumer *k+1*
  opens only when *k* is full, every message goes to exactly one consumer
  in queue order, the total never exceeds the target, and neither the
  16-bit prefetch nor the quorum default of 2,000 caps the depth.
* At the end every consumer is cancelled first (nothing can be redelivered
  to us), then the messages go back per consumer in order with
  ``basic.nack(multiple, requeue)``; order and depth are unchanged.
* Quorum queues count every return toward ``x-delivery-count`` (RabbitMQ
  < 4.3 also for nack). Where a delivery limit is in force the capture is
  refused before the first message, unless explicitly allowed; then it
  stops as soon as a message would reach the limit.

The delivery-limit rule, exactly (``return_plan``, ``check_delivery_limit``,
``_Run._on_message``). Let *L* be the effective limit (smallest of
``x-delivery-limit``, the policy's and the operator policy's
``delivery-limit``; 20 by default from 4.0) and *c* a message's
``x-delivery-count`` when we receive it (absent = 0). Every return makes it
*c + 1*; 3.10 drops or dead-letters a message whose count after a return
exceeds *L* (measured: with *L* = 3, the fourth return loses it).

* Returns count (RabbitMQ < 4.3, quorum, *L* set) and not allowed:
  ``DeliveryLimitRiskError`` before any message is consumed. Safe however
  often it runs.
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

import hashlib
import logging
import time
from dataclasses import dataclass

import orjson
import pika
import pika.exceptions

from airflow_rbak.broker import amqp_types
from airflow_rbak.broker.checkpoints import CheckpointStore, QueueProgress
from airflow_rbak.broker.connection import RabbitMQConnection
from airflow_rbak.broker.discovery import QueueInfo, effective_delivery_limit, parse_version
from airflow_rbak.broker.errors import (
    BrokerAuthError,
    BrokerError,
    BrokerUnreachableError,
    CaptureIntegrityError,
    CaptureInterruptedError,
    DeliveryLimitRiskError,
)
from airflow_rbak.broker.management import ManagementClient
from airflow_rbak.broker.staging import StagedChunk, StagingWriter
from airflow_rbak.codec.constants import Compression
from airflow_rbak.codec.records import BackupRecord, encode_record
from airflow_rbak.exceptions import ConfigurationError
from airflow_rbak.storage.base import Storage

log = logging.getLogger(__name__)
MAX_PREFETCH = 65535
#: Broker-owned headers that are state, not part of the published message.
QUORUM_BROKER_HEADERS = frozenset({"x-delivery-count"})
_CONNECTION_ERRORS = (pika.exceptions.AMQPConnectionError, pika.exceptions.AMQPChannelError, pika.exceptions.StreamLostError, OSError)


@dataclass(frozen=True)
class CaptureOptions:
    """How to capture; validated at construction."""

    backup_id: str
    compression: Compression = Compression.ZSTD
    chunk_max_records: int = 5000
    chunk_max_bytes: int = 8 * 1024 * 1024
    #: Unacked messages per consumer (the staircase step), 1-65535.
    window: int = 20000
    #: Back up quorum queues whose returns count toward a delivery limit.
    allow_delivery_count_increase: bool = False
    #: Seconds without a delivery before the queue is checked for having been drained by someone else.
    idle_timeout: float = 15.0

    def __post_init__(self) -> None:
        if not 1 <= self.window <= MAX_PREFETCH:
            raise ConfigurationError(f"window must be 1-{MAX_PREFETCH} (AMQP prefetch is 16-bit), got {self.window}")
        if self.idle_timeout <= 0:
            raise ConfigurationError("idle_timeout must be > 0")
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
    #: Seconds spent waiting for the broker to re-enqueue returned messages (quorum queues apply returns
    #: asynchronously; included in ``duration_s``).
    return_wait_s: float = 0.0


@dataclass(frozen=True)
class ReturnPlan:
    """How captured messages go back, and whether that counts toward a delivery limit."""

    method: str  # "nack"
    counts: bool
    limit: int | None


def return_plan(info: QueueInfo, version: str) -> ReturnPlan:
    """Decide how returns behave on this broker for this queue (see FIELD-NOTES)."""
    v = parse_version(version)
    if info.queue_type != "quorum":
        return ReturnPlan("nack", counts=False, limit=None)
    limit = effective_delivery_limit(info, v)
    return ReturnPlan("nack", counts=v < (4, 3, 0), limit=limit)


def check_delivery_limit(info: QueueInfo, version: str, plan: ReturnPlan, allow: bool) -> None:
    """Refuse, before any message is touched, a capture whose returns would count toward a limit."""
    if plan.counts and plan.limit is not None and not allow:
        raise DeliveryLimitRiskError(
            f"refusing to back up quorum queue {info.name!r} in vhost {info.vhost!r}: RabbitMQ {version} counts every "
            f"returned message toward its delivery limit of {plan.limit}, so each backup raises every message's "
            "x-delivery-count by one and repeated backups would drop or dead-letter messages. Remove the limit, "
            "upgrade to RabbitMQ 4.3+ (where basic.nack does not count), or set allow_delivery_count_increase=True "
            "(the capture then stops before any message reaches the limit)."
        )


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


def open_connection(connection: RabbitMQConnection, vhost: str) -> pika.BlockingConnection:
    """A blocking AMQP connection with typed errors (never showing the password)."""
    amqp_types.install()
    try:
        return pika.BlockingConnection(connection.pika_parameters(vhost))
    except pika.exceptions.ProbableAuthenticationError:
        raise BrokerAuthError(f"AMQP login refused for user {connection.username!r} on vhost {vhost!r}") from None
    except pika.exceptions.ProbableAccessDeniedError:
        raise BrokerAuthError(f"user {connection.username!r} may not access vhost {vhost!r}") from None
    except (pika.exceptions.AMQPError, OSError) as exc:
        raise BrokerUnreachableError(
            f"cannot connect to RabbitMQ at {connection.host}:{connection.amqp_port} (vhost {vhost!r}): "
            f"{type(exc).__name__}; check host, amqp_port and that the broker is running"
        ) from None


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
        plan = return_plan(info, broker_version)
        check_delivery_limit(info, broker_version, plan, opts.allow_delivery_count_increase)
        conn = open_connection(self.connection, info.vhost)
        try:
            run = _Run(self, conn, info, plan, done)
            try:
                run.consume()
                run.finish_staging()
            finally:
                run.give_back()
            settle_started = time.monotonic()
            depth_after = run.settled_depth()
            run.return_wait_s = time.monotonic() - settle_started
        except _CONNECTION_ERRORS as exc:
            raise CaptureInterruptedError(
                f"capture of {info.queue_type} queue {info.name!r} in vhost {info.vhost!r} was interrupted "
                f"({type(exc).__name__}) after {run_staged(self, info)} staged messages. No message was removed: "
                "unacknowledged messages go back to the queue when the connection drops. Re-run the same backup_id "
                "to resume."
            ) from None
        finally:
            _close_quietly(conn)
        return run.result(time.monotonic() - started, depth_after)


def run_staged(capture: QueueCapture, info: QueueInfo) -> int:
    progress = capture.checkpoints.get(capture.options.backup_id, info.vhost, info.name)
    return progress.staged_records if progress else 0


def _close_quietly(conn: pika.BlockingConnection) -> None:
    try:
        if conn.is_open:
            conn.close()
    except Exception:  # noqa: BLE001 - the connection may already be gone
        pass


def _result_from(p: QueueProgress, duration: float, skipped: bool = False) -> CaptureResult:
    return CaptureResult(
        vhost=p.vhost, queue=p.queue, queue_type=p.queue_type, messages=p.staged_records, bytes=p.staged_bytes,
        staged_chunks=p.last_chunk, duration_s=duration, target=p.target_count, skipped_completed=skipped,
        first_offset=p.stream_start_offset, last_offset=p.stream_end_offset,
    )


def _management_ready(connection: RabbitMQConnection, info: QueueInfo) -> int:
    """Ready messages by the management API (sampled, a few seconds old); 0 when it cannot tell."""
    try:
        with ManagementClient(connection) as client:
            return int(client.queue(info.vhost, info.name).get("messages_ready") or 0)
    except BrokerError:
        return 0


def _delivery_count(props: pika.spec.BasicProperties) -> int:
    for key, value in amqp_types.headers_of(props):
        if key == "x-delivery-count" and isinstance(value.value, int):
            return int(value.value)
    return 0


class _Run:
    """One pass over a queue: consume the staircase, stage, give everything back."""

    def __init__(self, owner: QueueCapture, conn: pika.BlockingConnection, info: QueueInfo, plan: ReturnPlan, progress: QueueProgress | None) -> None:
        self.opts, self.checkpoints, self.conn, self.info, self.plan = owner.options, owner.checkpoints, conn, info, plan
        self.connection = owner.connection
        self.channel = conn.channel()
        if progress is None:
            progress = QueueProgress(self.opts.backup_id, info.vhost, info.name, info.queue_type, target_count=self.initial_depth())
            self.checkpoints.save(progress)
        self.progress = progress
        self.target, self.skip = progress.target_count, progress.staged_records
        self.staged, self.staged_bytes = progress.staged_records, progress.staged_bytes
        self.received = self.requested = 0
        self.return_wait_s = 0.0
        self.consumers: list[str] = []
        self.last_tags: dict[str, int] = {}
        self.last_record: BackupRecord | None = None
        self.risk: str | None = None
        self.stopping = False
        self.drop = QUORUM_BROKER_HEADERS if info.queue_type == "quorum" else frozenset()
        self.writer = StagingWriter(
            owner.storage, self.opts.backup_id, info.vhost, info.name, next_sequence=progress.last_chunk + 1,
            compression=self.opts.compression, max_records=self.opts.chunk_max_records,
            max_bytes=self.opts.chunk_max_bytes, on_chunk=self._on_chunk,
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
        deadline = time.monotonic() + min(self.opts.idle_timeout, 3.0)
        while reported and time.monotonic() < deadline:
            time.sleep(0.5)
            if depth := self.depth():
                return depth
        if reported:
            log.warning("quorum queue %r in vhost %r reports 0 ready messages over AMQP but %d in the management API; "
                        "capturing by the management API's count", self.info.name, self.info.vhost, reported)
        return reported

    def settled_depth(self, wait: float | None = None) -> int:
        """Depth after the return; quorum queues apply returns asynchronously (and may answer 0, see
        :meth:`initial_depth`), so wait, then ask the management API.

        A busy broker re-enqueues tens of thousands of returns slowly (measured on 3.10 at load 8: 12,256 of
        70,000 after 20 s), so the wait grows with the number returned, up to two minutes; it ends as soon as
        the depth is back. The figure is a report: the messages are back either way.
        """
        if wait is None:
            wait = min(10.0 + self.target / 1000, 120.0)
        deadline = time.monotonic() + wait
        depth = self.depth()
        while depth < self.target and time.monotonic() < deadline:
            time.sleep(0.1)
            depth = self.depth()
        # The management API's figure is sampled every few seconds: give it one more interval to catch up.
        deadline = time.monotonic() + wait
        while depth < self.target and self.info.queue_type == "quorum" and time.monotonic() < deadline:
            depth = max(depth, _management_ready(self.connection, self.info))
            if depth < self.target:
                time.sleep(1.0)
        return depth

    def _open_consumer(self) -> None:
        step = min(self.opts.window, self.target - self.requested)
        self.channel.basic_qos(prefetch_count=step)
        tag = self.channel.basic_consume(self.info.name, self._on_message, auto_ack=False, consumer_tag=f"rbak-{len(self.consumers) + 1:05d}")
        self.consumers.append(tag)
        self.requested += step

    def consume(self) -> None:
        """Receive ``target`` messages (staging those past a resumed run's ``skip``)."""
        idle_since = time.monotonic()
        while self.received < self.target and self.risk is None:
            if self.received == self.requested:
                self._open_consumer()
            before = self.received
            self.conn.process_data_events(time_limit=0.25)
            now = time.monotonic()
            if self.received != before:
                idle_since = now
            elif now - idle_since > self.opts.idle_timeout:
                self._on_idle()
                idle_since = now
        if self.risk is not None:
            raise DeliveryLimitRiskError(self.risk)

    def _on_idle(self) -> None:
        if self.depth() == 0:
            log.warning("queue %r in vhost %r was drained by another consumer during capture; %d of %d captured",
                        self.info.name, self.info.vhost, self.received, self.target)
            self.target = self.received
            return
        raise CaptureInterruptedError(
            f"queue {self.info.name!r} in vhost {self.info.vhost!r} stopped delivering after {self.received} of "
            f"{self.target} messages for {self.opts.idle_timeout:.0f}s; re-run the same backup_id to resume"
        )

    def _on_message(self, _ch: object, method: pika.spec.Basic.Deliver, props: pika.spec.BasicProperties, body: bytes) -> None:
        self.received += 1
        self.last_tags[method.consumer_tag] = method.delivery_tag
        if self.risk is not None or self.stopping:
            return
        if self.plan.counts and self.plan.limit is not None and _delivery_count(props) + 1 >= self.plan.limit:
            self.risk = (
                f"stopped the backup of quorum queue {self.info.name!r} in vhost {self.info.vhost!r}: message "
                f"{self.received} has x-delivery-count {_delivery_count(props)}, and returning it again would bring it "
                f"to the queue's delivery limit of {self.plan.limit}. The messages were returned; this queue cannot "
                "be backed up safely by consume-and-return until its messages are consumed or the limit is raised."
            )
            return
        now_ms = int(time.time() * 1000)
        record = amqp_types.record_from_delivery(
            method, props, body, queue=self.info.name, vhost=self.info.vhost, backed_up_at=now_ms, drop_headers=self.drop
        )
        if self.received <= self.skip:
            if self.received == self.skip and self.progress.last_fingerprint not in (None, fingerprint(record)):
                self.risk = None
                raise CaptureIntegrityError(
                    f"queue {self.info.name!r} in vhost {self.info.vhost!r} changed since the interrupted run: message "
                    f"{self.skip} is not the one staged last. Start a new backup_id."
                )
            return
        self.staged += 1
        self.staged_bytes += len(body)
        self.last_record = record
        self.writer.add(encode_record(record), now_ms)

    def _on_chunk(self, chunk: StagedChunk) -> None:
        assert self.last_record is not None
        self.progress = QueueProgress(
            **{**self.progress.__dict__, "staged_records": self.staged, "staged_bytes": self.staged_bytes,
               "last_chunk": chunk.sequence, "last_fingerprint": fingerprint(self.last_record)}
        )
        self.checkpoints.save(self.progress)

    def finish_staging(self) -> None:
        """Store the last chunk and mark the queue complete."""
        self.writer.flush()
        self.progress = QueueProgress(**{**self.progress.__dict__, "target_count": self.target, "completed": True})
        self.checkpoints.save(self.progress)

    def give_back(self) -> None:
        """Cancel every consumer, then return each consumer's messages in order."""
        if not (self.conn.is_open and self.channel.is_open):
            return
        self._receive_the_rest()
        for tag in self.consumers:
            self.channel.basic_cancel(tag)
        for tag in self.consumers:
            if tag in self.last_tags:
                self.channel.basic_nack(self.last_tags[tag], multiple=True, requeue=True)

    def _receive_the_rest(self, quiet: float = 1.0) -> None:
        """Before cancelling a capture that stops early (an error, a limit), let the requested deliveries arrive.

        pika rejects one by one the deliveries it holds undispatched when a consumer is cancelled; a quorum
        queue would put those back ahead of the earlier messages that ``basic.nack`` returns, changing the
        queue's order. Received here, they are only noted, and go back with the rest, in order.
        """
        self.stopping = True
        idle_since = time.monotonic()
        while self.received < self.requested and time.monotonic() - idle_since < quiet:
            before = self.received
            self.conn.process_data_events(time_limit=0.1)
            if self.received != before:
                idle_since = time.monotonic()

    def result(self, duration: float, depth_after: int) -> CaptureResult:
        return CaptureResult(
            vhost=self.info.vhost, queue=self.info.name, queue_type=self.info.queue_type, messages=self.staged,
            bytes=self.staged_bytes, staged_chunks=self.progress.last_chunk, duration_s=round(duration, 3),
            target=self.target, resumed_from=self.skip, depth_after=depth_after, return_wait_s=round(self.return_wait_s, 3),
        )
