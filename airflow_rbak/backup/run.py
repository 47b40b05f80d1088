"""One backup from start to finish, one method per task of the backup DAG.

``discover`` (the queues; the broker is read before anything is written,
then the lock is taken and ``begin`` writes a manifest with
``completed_at: null``, so an interrupted backup says so) →
``export_definitions`` → ``capture`` per queue (staging + checkpoints) →
``encode`` per queue (in process here; the Spark job distributes the same
unit of work) → ``finish`` (segments and totals in the manifest,
``completed_at`` set, staging removed; the DAG's ``finalize`` does the same
from the encode job's report, then gives the lock back and applies
retention). Every step takes the backup's lock the same way
(:meth:`BackupRun.holding`: this run's owner carries on under it, its lease
renewed while the step runs) and finds its state through this object alone.
:meth:`BackupRun.run` calls the same methods in order, for the demo, the
tests and small installations.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

from airflow_rbak import __version__
from airflow_rbak.backup.finalize import (
    finalize_backup,
    finish_backup,
    left_out_of,
    manifest_summary,
    record_stream_offsets,
)
from airflow_rbak.broker.connection import RabbitMQConnection
from airflow_rbak.broker.definitions import export_definitions
from airflow_rbak.broker.discovery import QueueInfo, QueueSelector, discover_queues
from airflow_rbak.broker.management import ManagementClient
from airflow_rbak.capture.checkpoints import CaptureCheckpoints
from airflow_rbak.capture.limit_stops import LimitStops, default_state_dir, open_ledger
from airflow_rbak.capture.queue_capture import CaptureOptions, CaptureResult, QueueCapture
from airflow_rbak.capture.queue_features import DEFAULT_CONSUMER_TIMEOUT_MS, Facts, decide
from airflow_rbak.capture.stream_capture import StreamCapture
from airflow_rbak.capture.stream_identity import StreamMark
from airflow_rbak.codec import BackupManifest, QueueBackup, SegmentWriter
from airflow_rbak.codec.constants import DEFAULT_SEGMENT_MAX_BYTES, DEFAULT_SEGMENT_MAX_INTERVAL_MS, Compression
from airflow_rbak.codec.journal_layout import ARCHIVE_PREFIX
from airflow_rbak.codec.layout import check_backup_id
from airflow_rbak.codec.manifest import SELECTED_VHOSTS
from airflow_rbak.display import package_logger
from airflow_rbak.exceptions import ConfigurationError, RbakError
from airflow_rbak.progress import ProgressReporter, checkpoint_sampler
from airflow_rbak.repository.abandoned import remove_abandoned
from airflow_rbak.repository.catalog import DEFAULT_ABANDONED_AFTER_MS
from airflow_rbak.repository.chain_link import ChainLock, latest_with_stream
from airflow_rbak.repository.lock import BackupLock, LeasedStorage
from airflow_rbak.repository.manifest_store import ManifestNotFoundError, ManifestStore
from airflow_rbak.repository.retention import RetentionPolicy, apply_retention
from airflow_rbak.repository.writer import now_ms
from airflow_rbak.segments.encode import EncodeSpec, QueueRef, encode_queue_here
from airflow_rbak.storage import open_storage
from airflow_rbak.storage.base import Storage
from airflow_rbak.storage.sealed import StateSeal

log = package_logger(__name__)


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
    #: Keep users, their password hashes and permissions in the definitions export (no restore imports them).
    include_users: bool = False
    #: Who holds the backup's lock: every task of one DAG run passes the same owner; None: this run alone.
    lock_owner: str | None = None
    #: Take over the lock of a run that crashed (see :mod:`airflow_rbak.repository.lock`).
    break_lock: bool = False
    #: A queue that cannot be read without changing it: "skip" leaves it out, named with its reason; "fail" fails.
    on_unsafe_queue: str = "skip"
    #: The broker's ``consumer_timeout`` in ms (rabbitmq.conf; RabbitMQ's default is 30 min).
    consumer_timeout_ms: int = DEFAULT_CONSUMER_TIMEOUT_MS
    #: The longest a capture may withhold a queue's messages from its consumers, in ms; None: the consumer timeout's.
    max_hold_ms: int | None = None

    def __post_init__(self) -> None:
        check_backup_id(self.backup_id)
        if self.backup_id.startswith(ARCHIVE_PREFIX):  # the whole prefix is the journal's, not just its ids
            raise ConfigurationError(f"backup id {self.backup_id!r} starts with {ARCHIVE_PREFIX!r}, which names the "
                                     "journal's archives (a recovery would not take it for a snapshot); choose another")
        object.__setattr__(self, "compression", Compression.parse(self.compression))
        self.segment_writer()  # validates level and rotation limits

    @property
    def codec(self) -> Compression:
        """The segments' compression (``compression`` is parsed into one at construction)."""
        return Compression.parse(self.compression)

    def segment_writer(self) -> SegmentWriter:
        return SegmentWriter(self.compression, self.compression_level, self.segment_max_bytes, self.segment_max_interval_ms)


@dataclass(frozen=True)
class Discovery:
    """What the discover step found: the queues to capture and the manifest ``begin`` wrote (or found)."""

    backup_id: str
    queues: list[QueueInfo]
    manifest: BackupManifest
    #: The queues the capture will leave out as things stand (a preview: each capture decides again).
    expected_left_out: list[dict[str, Any]]

    def summary(self) -> dict[str, Any]:
        """The discover task's ``summary`` XCom."""
        return {"backup_id": self.backup_id, "queues": len(self.queues), "messages": sum(q.messages for q in self.queues),
                "rabbitmq_version": self.manifest.rabbitmq_version, "source_cluster": self.manifest.source_cluster,
                "expected_left_out": self.expected_left_out}

    def encode_inputs(self) -> list[dict[str, str]]:
        """Each queue's name and type: what the encode step needs (the ``queue_refs`` XCom)."""
        return [{"vhost": q.vhost, "name": q.name, "queue_type": q.queue_type} for q in self.queues]


class BackupRun:
    """The steps of one backup against one broker and one storage location, one method per DAG task."""

    def __init__(self, connection: RabbitMQConnection | None, settings: BackupSettings,
                 storage: Storage | None = None, seal: StateSeal | None = None,
                 state_dir: str | os.PathLike[str] | None = None) -> None:
        self._connection = connection
        self.settings = settings
        #: Seals the capture checkpoints and delivery-limit stops (``storage.sealed``): a planted one is never trusted.
        self.seal = seal
        #: The deployment's ledger of delivery-limit stops (``[rbak] state_dir``; None: ``default_state_dir()``).
        self.state_dir = state_dir
        self.plain_storage = storage or open_storage(settings.storage_url)
        self.lock = BackupLock(self.plain_storage, settings.backup_id, settings.lock_owner)
        # Every write of every step is checked against the lock: a run whose lock is taken over stops at once.
        self.storage = LeasedStorage(self.plain_storage, self.lock)
        self.manifests = ManifestStore(self.storage)
        self._holding = False

    @property
    def connection(self) -> RabbitMQConnection:
        """The broker's connection settings (the finalize step has none: it never reaches the broker)."""
        if self._connection is None:
            raise ConfigurationError("this backup step needs a broker connection")
        return self._connection

    def run(self) -> BackupManifest:
        """Every step in order under the backup's lock; returns the completed manifest.

        A backup that is already complete is returned as it is: running it again must not replace
        its manifest (its staging is gone, so a second encode would find nothing).
        """
        done = self._existing()
        if done is not None and done.completed_at is not None:
            log.info("backup %s is already complete; nothing to do", self.settings.backup_id)
            return done
        try:
            found = self.discover()
            with self.holding():
                self.export_definitions()
                captures = [self.capture(info) for info in found.queues]
                entries = [self.encode(info, result) for info, result in zip(found.queues, captures)
                           if result.left_out is None]
                return self.finish(entries, left_out_of(asdict(c) for c in captures))
        finally:
            self._release_lock()

    @contextlib.contextmanager
    def holding(self) -> Iterator[None]:
        """Hold the backup's lock while a step runs: take it (this run's owner carries on under it; ``break_lock``
        takes over a crashed run's) and renew its lease until the step ends. Steps nest: only the outer one
        takes and renews."""
        if self._holding:
            yield
            return
        self.lock.acquire(break_lock=self.settings.break_lock)
        self._holding = True
        try:
            with self.lock.renewing():
                yield
        finally:
            self._holding = False

    def discover(self) -> Discovery:
        """The discover task: list the queues, then take the lock and write the manifest with ``completed_at: null``.

        The broker is read before anything is written, so an unreachable broker leaves no manifest and no lock.
        """
        with ManagementClient(self.connection) as client:
            queues = discover_queues(client, self.settings.selector)
            with self.holding():
                manifest = self.begin(client)
        facts = Facts(manifest.rabbitmq_version or "0", self.settings.allow_delivery_count_increase)
        foreseen = [{"vhost": q.vhost, "queue": q.name, "reason": d.reason} for q in queues
                    if (d := decide(q, facts)).left_out]
        return Discovery(self.settings.backup_id, queues, manifest, foreseen)

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
        if self.settings.selector.vhosts:
            # The definitions export holds every vhost; a restore imports by default only those the backup chose.
            manifest.extensions[SELECTED_VHOSTS] = sorted(self.settings.selector.vhosts)
        self.manifests.save(manifest)
        return manifest

    def export_definitions(self) -> dict[str, Any]:
        """The export_definitions task: store the broker's definitions (unless ``include_definitions`` is off)
        and record them in the manifest; returns the task's summary."""
        if not self.settings.include_definitions:
            return {"included": False}
        with self.holding(), ManagementClient(self.connection) as client:
            manifest = self.manifests.load(self.settings.backup_id)
            manifest.definitions = export_definitions(client, self.storage, self.settings.backup_id,
                                                      self.settings.codec, include_users=self.settings.include_users)
            self.manifests.save(manifest)
        return {"included": True, **(manifest.definitions.to_json() if manifest.definitions else {})}

    def capture(self, info: QueueInfo, *, progress_every: float | None = None, logger: Any = None) -> CaptureResult:
        """The capture task, for one queue: capture it into staging; resumes from its checkpoint when re-run.

        With ``progress_every`` (seconds), a line of progress read from the queue's checkpoint goes to ``logger``
        that often while the capture runs, and one when it ends.
        """
        out = logger or log
        with self.holding(), self._progress(info, progress_every, out):
            result = self._capture(info)
        if result.left_out:
            out.warning("left out %s/%s: %s", info.vhost, info.name, result.left_out)
        else:
            out.info("captured %s/%s (%s): %d messages, %.1f MB in %.1fs", info.vhost, info.name, result.method,
                     result.messages, result.bytes / 1e6, result.duration_s)
        if result.depth_at_start is not None and result.messages < result.depth_at_start:
            out.warning("%s/%s completed short: %d captured of the %d ready at the capture's start; consumers took "
                        "the rest during the capture (docs/production.md)", info.vhost, info.name, result.messages,
                        result.depth_at_start)
        return result

    def _progress(self, info: QueueInfo, every: float | None, logger: Any) -> contextlib.AbstractContextManager[Any]:
        if every is None:
            return contextlib.nullcontext()
        sample = checkpoint_sampler(self.checkpoints(), self.settings.backup_id, info.vhost, info.name)
        return ProgressReporter(f"{info.vhost}/{info.name}", sample, info.messages, interval=every, logger=logger)

    def _capture(self, info: QueueInfo) -> CaptureResult:
        options = CaptureOptions(
            backup_id=self.settings.backup_id,
            compression=self.settings.codec,
            allow_delivery_count_increase=self.settings.allow_delivery_count_increase,
            on_unsafe_queue=self.settings.on_unsafe_queue,
            consumer_timeout_ms=self.settings.consumer_timeout_ms,
            max_hold_ms=self.settings.max_hold_ms,
        )
        checkpoints = self.checkpoints()
        try:
            if info.queue_type == "stream":
                mark = self._stream_mark(info)
                with ManagementClient(self.connection) as client:
                    capture = StreamCapture(self.connection, self.storage, checkpoints, options)
                    return capture.capture(info, resume_after=mark, management=client)
            with ManagementClient(self.connection) as client:
                version = client.version()
            stops = LimitStops(self.storage, open_ledger(self.state_dir or default_state_dir()), checkpoints.seal)
            return QueueCapture(self.connection, self.storage, checkpoints, options, stops).capture(info, version)
        finally:
            checkpoints.close()

    def encode(self, info: QueueInfo, capture: CaptureResult | None = None) -> QueueBackup:
        """Seal one queue's staging into final segments (the DAG's segment stages' encode, in this process);
        stream offsets go into its manifest entry."""
        ref = QueueRef(info.vhost, info.name, info.queue_type)
        settings = EncodeSpec(self.settings.codec.name.lower(), self.settings.compression_level,
                                  self.settings.segment_max_bytes, self.settings.segment_max_interval_ms)
        with self.holding():
            entry, _, _ = encode_queue_here(self.storage, self.settings.backup_id, ref, settings)
        if capture is not None and info.queue_type == "stream":
            record_stream_offsets(entry, capture.first_offset, capture.last_offset, capture.consumer_offsets,
                                  capture.last_fingerprint)
        return entry

    def finish(self, entries: list[QueueBackup], left_out: list[dict[str, str]] | None = None) -> BackupManifest:
        """Write the completed manifest (only while this run holds the lock), then remove the staging."""
        with self.holding():
            self.lock.check()
            return finish_backup(self.storage, self.settings.backup_id, entries, left_out, self.chain_lock())

    def finalize(self, encode_report_key: str, captures: Iterable[Mapping[str, Any]] = (),
                 retention: RetentionPolicy | None = None,
                 abandoned_after_ms: int = DEFAULT_ABANDONED_AFTER_MS) -> dict[str, Any]:
        """The finalize task: the completed manifest from the encode report and the captures' results, staging
        removed, the lock given back, then retention and the removal of abandoned backups (whose lock has not been
        renewed for ``abandoned_after_ms``); returns the summary (XCom and the Asset event)."""
        # The manifest is written only by the run that holds the backup (re-taken by a retry after it was given back).
        with self.holding():
            manifest = finalize_backup(self.storage, self.settings.backup_id, encode_report_key, captures,
                                       self.chain_lock())
        self.lock.release()
        summary = manifest_summary(manifest, self.plain_storage.url)
        done = apply_retention(self.plain_storage, retention or RetentionPolicy(), now_ms=int(time.time() * 1000),
                               protect=self.settings.backup_id)
        summary["retention_deleted"] = done.deleted
        summary["retention_segments_kept_for_chains"] = done.segments_kept_for_chains
        summary["retention_kept"] = done.kept
        summary["abandoned_removed"] = self.remove_abandoned(abandoned_after_ms)
        return summary

    def remove_abandoned(self, after_ms: int = DEFAULT_ABANDONED_AFTER_MS) -> list[str]:
        """Remove the location's abandoned backups (:mod:`airflow_rbak.repository.abandoned`); return their ids.

        The backup is complete by now: a failure here is logged, never the run's.
        """
        try:
            gone = remove_abandoned(self.plain_storage, after_ms=after_ms)
        except RbakError as exc:
            log.warning("could not remove abandoned backups from %s (%s)", self.plain_storage.url, exc)
            return []
        for backup_id, error in gone.errors.items():
            log.warning("abandoned backup %s stays: %s", backup_id, error)
        return gone.removed

    def chain_lock(self) -> ChainLock:
        """The location's chain lock, for this run picking a stream's base or linking its chains."""
        return ChainLock(self.plain_storage, f"backup {self.settings.backup_id} ({self.lock.owner})")

    def checkpoints(self) -> CaptureCheckpoints:
        """This backup's capture checkpoints, in its own storage: any worker resumes any queue, and the capture
        task's progress lines read them from there."""
        return CaptureCheckpoints(self.storage, self.settings.backup_id, self.seal)

    def _stream_mark(self, info: QueueInfo) -> StreamMark | None:
        """Where the newest complete backup holding this stream ended (None: capture it from its start).

        Picked between retention passes (under the chain lock): a pass that follows sees this run's lock and keeps
        the backups it may continue from.
        """
        if not self.settings.incremental_streams:
            return None
        with self.chain_lock().held():
            previous = latest_with_stream(self.storage, self.settings.backup_id, info.vhost, info.name)
        if previous is None:
            return None
        entry = previous.queue(info.vhost, info.name)
        offsets: dict[str, Any] = entry.extensions.get("stream_offsets", {}) if entry else {}
        last, fingerprint = offsets.get("last"), offsets.get("last_fingerprint")
        if not isinstance(last, int) or last < 0:
            return None
        return StreamMark(previous.backup_id, last, fingerprint if isinstance(fingerprint, str) else None)
