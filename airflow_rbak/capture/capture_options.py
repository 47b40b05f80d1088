"""A capture's settings and report (a message's identity across captures: ``message_identity.py``)."""

from __future__ import annotations

from dataclasses import dataclass

from airflow_rbak.capture.checkpoints import QueueProgress
from airflow_rbak.capture.message_identity import fingerprint  # noqa: F401 - re-exported
from airflow_rbak.capture.queue_features import DEFAULT_CONSUMER_TIMEOUT_MS
from airflow_rbak.codec.constants import Compression
from airflow_rbak.exceptions import ConfigurationError

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
    #: How it was read (:class:`~airflow_rbak.capture.queue_features.CaptureMethod`).
    method: str | None = None


def result_from(p: QueueProgress, duration: float, skipped: bool = False) -> CaptureResult:
    """The report of a capture from its checkpoint (a completed one that is skipped, or a stream's)."""
    return CaptureResult(
        vhost=p.vhost, queue=p.queue, queue_type=p.queue_type, messages=p.staged_records, bytes=p.staged_bytes,
        staged_chunks=p.last_chunk, duration_s=duration, target=p.target_count, skipped_completed=skipped,
        first_offset=p.stream_start_offset, last_offset=p.stream_end_offset,
    )
