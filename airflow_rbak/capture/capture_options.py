"""A capture's options and report (a message's identity across captures: ``message_identity.py``), what bounds a
capture in time, and when a queue that stopped delivering may be taken as drained.

*Consumer timeout.* The broker closes a channel whose oldest unacked
delivery is older than ``consumer_timeout`` (30 min by default; checked on
the channel's tick, every 60 s by default, so it may close late but never
early). A capture holds every message it has read until it gives them all
back, so it must finish within that time from its first delivery (the
:class:`Deadline` counts from the first consumer, a little earlier): the
:class:`Deadline` leaves a margin for the return itself and stops the
capture when it is reached, or earlier when the rate so far says the rest
cannot be read in time.

*A depth of 0.* A queue that stops delivering before the capture has its
target was either drained by another client (the capture then backs up
what the queue held for it) or the broker is slow to answer (RabbitMQ 3.10
answers 0 for a quorum queue whose leader is busy or unreachable). Only
evidence decides: a classic queue's AMQP count is exact; a quorum queue's 0
counts only when the management API agrees *and* its figures already show
the messages this capture holds (so they were sampled after it started).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Protocol

from airflow_rbak.broker.connection import RabbitMQConnection
from airflow_rbak.broker.discovery import QueueInfo
from airflow_rbak.broker.errors import BrokerError
from airflow_rbak.broker.management import ManagementClient
from airflow_rbak.capture.checkpoints import CaptureCheckpoints, QueueProgress
from airflow_rbak.capture.message_identity import fingerprint  # noqa: F401 - re-exported
from airflow_rbak.capture.queue_features import DEFAULT_CONSUMER_TIMEOUT_MS
from airflow_rbak.codec.constants import Compression
from airflow_rbak.exceptions import ConfigurationError
from airflow_rbak.storage.base import Storage

MAX_PREFETCH = 65535


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
    #: The longest the capture may withhold a queue's messages from its consumers (docs/production.md), the return
    #: included; None: as long as the consumer timeout allows. The lower of the two bounds the capture.
    max_hold_ms: int | None = None

    def __post_init__(self) -> None:
        if not 1 <= self.window <= MAX_PREFETCH:
            raise ConfigurationError(f"window must be 1-{MAX_PREFETCH} (AMQP prefetch is 16-bit), got {self.window}")
        if self.idle_timeout <= 0 or self.inconclusive_checks < 0:
            raise ConfigurationError("idle_timeout must be > 0 and inconclusive_checks >= 0")
        if self.on_unsafe_queue not in ("skip", "fail"):
            raise ConfigurationError(f"on_unsafe_queue must be 'skip' or 'fail', got {self.on_unsafe_queue!r}")
        if self.consumer_timeout_ms < 1000:
            raise ConfigurationError(f"consumer_timeout_ms must be at least 1000, got {self.consumer_timeout_ms}")
        if self.max_hold_ms is not None and self.max_hold_ms < 1000:
            raise ConfigurationError(f"max_hold_ms must be at least 1000 (or null), got {self.max_hold_ms}")
        object.__setattr__(self, "compression", Compression.parse(self.compression))


class CaptureOwner(Protocol):
    """What one pass over a queue (``queue_run.QueueRun``) takes from the ``QueueCapture`` that runs it."""

    connection: RabbitMQConnection
    storage: Storage
    checkpoints: CaptureCheckpoints
    options: CaptureOptions


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
    #: How it was read (:class:`~airflow_rbak.capture.queue_features.CaptureMethod`).
    method: str | None = None
    #: Classic and quorum queues: the ready messages when the capture started (its first run's, when resumed). Fewer
    #: ``messages`` than this means other consumers took the rest during the capture: it "completed short".
    depth_at_start: int | None = None


def result_from(p: QueueProgress, duration: float, skipped: bool = False) -> CaptureResult:
    """The report of a capture from its checkpoint (a completed one that is skipped, or a stream's)."""
    return CaptureResult(
        vhost=p.vhost, queue=p.queue, queue_type=p.queue_type, messages=p.staged_records, bytes=p.staged_bytes,
        staged_chunks=p.last_chunk, duration_s=duration, target=p.target_count, skipped_completed=skipped,
        first_offset=p.stream_start_offset, last_offset=p.stream_end_offset,
    )


@dataclass
class Deadline:
    """The latest moment a capture may still hold messages, counted from its first consumer (or ``basic.get``)."""

    timeout_ms: int
    started: float | None = None
    #: What sets ``timeout_ms``, for the messages (the broker's consumer timeout unless the user's ``max_hold_ms``).
    bound: str = "a consumer_timeout"

    @property
    def budget_s(self) -> float:
        """The timeout less a margin for giving everything back (10%, at least 5 s, at most half)."""
        timeout = self.timeout_ms / 1000
        return timeout - min(max(timeout * 0.1, 5.0), timeout * 0.5)

    def start(self) -> None:
        if self.started is None:
            self.started = time.monotonic()

    def exceeded(self, received: int, target: int) -> str | None:
        """Why the capture must stop now, or None: out of time, or the rate so far cannot finish in time."""
        if self.started is None or received <= 0:
            return None
        elapsed = time.monotonic() - self.started
        if elapsed >= self.budget_s:
            return f"held its messages for {elapsed:.0f} s, the most it may within {self.bound} of {self.timeout_ms} ms"
        projected = elapsed * target / received
        if elapsed >= self.budget_s / 4 and projected > self.budget_s:
            return (f"would need about {projected:.0f} s for {target} messages at the rate so far ({received} in "
                    f"{elapsed:.0f} s), more than {self.bound} of {self.timeout_ms} ms allows")
        return None


def management_counts(connection: RabbitMQConnection, info: QueueInfo) -> tuple[int, int] | None:
    """(ready, unacknowledged) by the management API, or None when it has no figures or cannot be reached."""
    try:
        with ManagementClient(connection) as client:
            data = client.queue(info.vhost, info.name)
    except BrokerError:
        return None
    if data.get("messages_ready") is None or data.get("messages_unacknowledged") is None:
        return None
    return int(data["messages_ready"]), int(data["messages_unacknowledged"])


def drained_by_others(amqp_depth: int, counts: tuple[int, int] | None, queue_type: str, held: int) -> bool:
    """Whether a queue that stopped delivering holds nothing more for this capture (module docstring)."""
    if amqp_depth:
        return False
    if queue_type != "quorum":
        return True
    if counts is None:
        return False
    ready, unacked = counts
    return ready == 0 and unacked >= held
