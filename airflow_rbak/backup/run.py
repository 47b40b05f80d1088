"""One backup from start to finish, as separate steps the DAG runs as separate tasks.

``discover`` → ``begin`` (a manifest with ``completed_at: null``, so an
interrupted backup says so) → ``export_definitions`` → ``capture`` per queue
(staging + checkpoints) → ``encode`` per queue (in process here; the Spark
job distributes the same unit of work) → ``finish`` (segments and totals in
the manifest, ``completed_at`` set, staging removed). :meth:`BackupRun.run`
does them all in order, for the demo, the tests and small installations.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

from airflow_rbak import __version__
from airflow_rbak.backup.chain import latest_with_stream, link_chains
from airflow_rbak.backup.encode import encode_queue, staged_chunk_keys
from airflow_rbak.backup.lease import LeasedStorage
from airflow_rbak.backup.lock import BackupLock
from airflow_rbak.backup.manifest_store import ManifestNotFoundError, ManifestStore
from airflow_rbak.backup.writer import now_ms
from airflow_rbak.broker.capture import CaptureOptions, CaptureResult, QueueCapture
from airflow_rbak.broker.checkpoints import CheckpointStore, queue_chunk_keys, write_offsets_summary
from airflow_rbak.broker.connection import RabbitMQConnection
from airflow_rbak.broker.definitions import export_definitions
from airflow_rbak.broker.discovery import QueueInfo, QueueSelector, discover_queues
from airflow_rbak.broker.management import ManagementClient
from airflow_rbak.broker.queue_features import DEFAULT_CONSUMER_TIMEOUT_MS
from airflow_rbak.broker.stream_capture import StreamCapture
from airflow_rbak.broker.stream_identity import StreamMark
from airflow_rbak.codec import BackupManifest, QueueBackup, SegmentWriter
from airflow_rbak.codec.constants import DEFAULT_SEGMENT_MAX_BYTES, DEFAULT_SEGMENT_MAX_INTERVAL_MS, Compression
from airflow_rbak.codec.layout import check_backup_id
from airflow_rbak.exceptions import RbakError
from airflow_rbak.storage import open_storage
from airflow_rbak.storage.base import Storage

log = logging.getLogger(__name__)


#: The backup DAG's ``streams`` param: continue each stream's chain (default), or copy every stream whole.
STREAM_MODES = ("incremental", "full")


class BackupAlreadyCompleteError(RbakError):
    """The backup id names a complete backup, which is never written again."""


@dataclass(frozen=True)
class BackupSettings:
    """What to back up and how; validated at construction (before any I/O)."""

    backup_id: str
    storage_url: str
    selector: QueueSelector = field(default_factory=QueueSelector)
    compression: Compression | str = Compression.ZSTD
    compression_level: int = 3
    segment_max_bytes: int = DEFAULT_SEGMENT_MAX_BYTES
    segment_max_interval_ms: int = DEFAULT_SEGMENT_MAX_INTERVAL_MS
    include_definitions: bool = True
    allow_delivery_count_increase: bool = False
    #: Streams continue after the offset the newest complete backup of them in the same location reached, and
    #: list that backup's segments before their own; False: each backup holds a full copy of every stream.
    incremental_streams: bool = True
    #: Leave users, their password hashes and permissions out of the definitions export.
    include_users: bool = True
    #: Who holds the backup's lock: every task of one DAG run passes the same owner; None: this run alone.
    lock_owner: str | None = None
    #: Take over the lock of a run that crashed (see :mod:`airflow_rbak.backup.lock`).
    break_lock: bool = False
    #: A queue that cannot be read without changing it: "skip" leaves it out, named with its reason; "fail" fails.
    on_unsafe_queue: str = "skip"
    #: The broker's ``consumer_timeout`` in ms (rabbitmq.conf; RabbitMQ's default is 30 min).
    consumer_timeout_ms: int = DEFAULT_CONSUMER_TIMEOUT_MS

    def __post_init__(self) -> None:
        check_backup_id(self.backup_id)
        object.__setattr__(self, "compression", Compression.parse(self.compression))
        self.segment_writer()  # validates level and rotation limits

    def segment_writer(self) -> SegmentWriter:
        return SegmentWriter(self.compression, self.compression_level, self.segment_max_bytes, self.segment_max_interval_ms)


class BackupRun:
    """The steps of one backup against one broker and one storage location."""

    def __init__(self, connection: RabbitMQConnection, settings: BackupSettings, storage: Storage | None = None) -> None:
        self.connection = connection
        self.settings = settings
        plain = storage or open_storage(settings.storage_url)
        self.lock = BackupLock(plain, settings.backup_id, settings.lock_owner)
        # Every write of every step is checked against the lock: a run whose lock is taken over stops at once.
        self.storage = LeasedStorage(plain, self.lock)
        self.manifests = ManifestStore(self.storage)

    def run(self) -> BackupManifest:
        """Every step in order under the backup's lock; returns the completed manifest.

        A backup that is already complete is returned as it is: running it again must not replace
        its manifest (its staging is gone, so a second encode would find nothing).
        """
        self.lock.acquire(break_lock=self.settings.break_lock)
        try:
            with self.lock.renewing():
                return self._run()
        finally:
            self._release_lock()

    def _run(self) -> BackupManifest:
        """The steps themselves, run while the lock is held and its lease renewed."""
        done = self._existing()
        if done is not None and done.completed_at is not None:
            log.info("backup %s is already complete; nothing to do", self.settings.backup_id)
            return done
        with ManagementClient(self.connection) as client:
            queues = discover_queues(client, self.settings.selector)
            self.begin(client)
            if self.settings.include_definitions:
                self.export_definitions(client)
        captures = [self.capture(info) for info in queues]
        entries = [self.encode(info, result) for info, result in zip(queues, captures) if result.left_out is None]
        return self.finish(entries, left_out_of(asdict(c) for c in captures))

    def _existing(self) -> BackupManifest | None:
        try:
            return self.manifests.load(self.settings.backup_id)
        except ManifestNotFoundError:
            return None

    def _release_lock(self) -> None:
        """Give the lock back; a failure here must not hide the run's own outcome or error."""
        try:
            self.lock.release()
        except RbakError as exc:
            log.warning("could not give back the lock of backup %s (%s); if it stays, remove it with "
                        "`rbak unlock` or run again with break_lock", self.settings.backup_id, exc)

    def begin(self, client: ManagementClient) -> BackupManifest:
        """Write the manifest with ``completed_at: null`` unless this backup already has one (a re-run).

        Refuses a backup that is already complete (:class:`BackupAlreadyCompleteError`): a completed
        backup is never written again.
        """
        existing = self._existing()
        if existing is not None and existing.completed_at is not None:
            raise BackupAlreadyCompleteError(
                f"backup {self.settings.backup_id!r} in {self.storage.url} is already complete; a completed backup "
                "is never written again: choose another backup_id")
        if existing is not None:
            return existing
        manifest = BackupManifest(
            backup_id=self.settings.backup_id,
            created_at=now_ms(),
            backup_tool_version=__version__,
            source_cluster=client.cluster_name(),
            rabbitmq_version=client.version(),
        )
        self.manifests.save(manifest)
        return manifest

    def export_definitions(self, client: ManagementClient) -> None:
        manifest = self.manifests.load(self.settings.backup_id)
        manifest.definitions = export_definitions(client, self.storage, self.settings.backup_id, self.settings.compression,
                                                  include_users=self.settings.include_users)
        self.manifests.save(manifest)

    def capture(self, info: QueueInfo) -> CaptureResult:
        """Capture one queue into staging; resumes from its checkpoint when re-run."""
        options = CaptureOptions(
            backup_id=self.settings.backup_id,
            compression=self.settings.compression,
            allow_delivery_count_increase=self.settings.allow_delivery_count_increase,
            on_unsafe_queue=self.settings.on_unsafe_queue,
            consumer_timeout_ms=self.settings.consumer_timeout_ms,
        )
        checkpoints = self.checkpoints()
        try:
            if info.queue_type == "stream":
                with ManagementClient(self.connection) as client:
                    capture = StreamCapture(self.connection, self.storage, checkpoints, options)
                    return capture.capture(info, resume_after=self._stream_mark(info), management=client)
            with ManagementClient(self.connection) as client:
                version = client.version()
            return QueueCapture(self.connection, self.storage, checkpoints, options).capture(info, version)
        finally:
            checkpoints.close()

    def encode(self, info: QueueInfo, capture: CaptureResult | None = None) -> QueueBackup:
        """Seal one queue's staging into final segments; stream offsets go into its manifest entry."""
        entry = QueueBackup(vhost=info.vhost, name=info.name, queue_type=info.queue_type)
        keys = queue_chunk_keys(self.storage, self.settings.backup_id, info.vhost, info.name)
        encode_queue(self.storage, self.settings.backup_id, entry, self.settings.segment_writer(), keys)
        if capture is not None and info.queue_type == "stream":
            record_stream_offsets(entry, capture.first_offset, capture.last_offset, capture.consumer_offsets,
                                  capture.last_fingerprint)
        return entry

    def finish(self, entries: list[QueueBackup], left_out: list[dict[str, str]] | None = None) -> BackupManifest:
        """Write the completed manifest (only while this run holds the lock), then remove the staging."""
        self.lock.check()
        return finish_backup(self.storage, self.settings.backup_id, entries, left_out)

    def checkpoints(self) -> CheckpointStore:
        """This backup's capture checkpoints, in its own storage: any worker resumes any queue, and the capture
        task's progress lines read them from there."""
        return CheckpointStore(self.storage, self.settings.backup_id)

    def _stream_mark(self, info: QueueInfo) -> StreamMark | None:
        """Where the newest complete backup holding this stream ended (None: capture it from its start)."""
        if not self.settings.incremental_streams:
            return None
        previous = latest_with_stream(self.storage, self.settings.backup_id, info.vhost, info.name)
        if previous is None:
            return None
        entry = previous.queue(info.vhost, info.name)
        offsets: dict[str, Any] = entry.extensions.get("stream_offsets", {}) if entry else {}
        last, fingerprint = offsets.get("last"), offsets.get("last_fingerprint")
        if not isinstance(last, int) or last < 0:
            return None
        return StreamMark(previous.backup_id, last, fingerprint if isinstance(fingerprint, str) else None)


def record_stream_offsets(
    entry: QueueBackup, first: int | None, last: int | None, consumer_offsets: dict[str, int] | None,
    last_fingerprint: str | None = None,
) -> None:
    """Keep a stream's captured offset range (and its last message's fingerprint, which lets the next backup
    tell a re-created stream from a grown one) and its named consumers' offsets in its manifest entry."""
    entry.extensions["stream_offsets"] = {"first": first, "last": last, "last_fingerprint": last_fingerprint}
    entry.extensions["consumer_offsets"] = dict(consumer_offsets or {})


def left_out_of(captures: Iterable[Mapping[str, Any]]) -> list[dict[str, str]]:
    """The queues the captures left out, each with its reason (what the manifest and the summaries name)."""
    return [{"vhost": c["vhost"], "queue": c["queue"], "queue_type": c["queue_type"], "reason": c["left_out"]}
            for c in captures if c.get("left_out")]


def finish_backup(
    storage: Storage, backup_id: str, entries: list[QueueBackup], left_out: list[dict[str, str]] | None = None
) -> BackupManifest:
    """Complete the manifest ``begin`` wrote (totals, ``completed_at``), save it, then remove staging.

    The manifest is the last thing written; staging goes only once it is safely stored. Queues left out are
    named with their reasons in the ``left_out`` extension (a foreign reader ignores it), never listed as queues;
    what an earlier attempt staged for them goes with the rest of the staging. A stream that continued an
    earlier backup lists that backup's segments before its own (:mod:`backup.chain`), so the completed backup
    restores whole on its own.
    """
    store = ManifestStore(storage)
    manifest = store.load(backup_id)
    manifest.queues = entries
    manifest.extensions["left_out"] = list(left_out or [])
    link_chains(storage, manifest)
    manifest.refresh_totals()
    manifest.completed_at = now_ms()
    store.save(manifest)
    write_offsets_summary(storage, backup_id)
    for vhost, name in [(e.vhost, e.name) for e in entries] + [(q["vhost"], q["queue"]) for q in left_out or []]:
        for key in staged_chunk_keys(storage, backup_id, vhost, name):
            storage.delete(key)
    return manifest
