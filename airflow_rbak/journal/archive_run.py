"""One archive run of a vhost's journal: one completed RBAK backup, its messages acked only once it is stored.

The run checks the journal on the broker first (tracing on every node, the queue there, whether it filled up),
turns back on the tracing a node lost, and names each hole as a gap with its time range. It refuses a journal the
operator turned off (unbound, or its queue missing: only ``rbak journal enable`` journals the vhost again). Then it
drains the journal up to a clock mark (``drain.py``) into segments through the repository's writer, writes the
manifest with the ``journal`` addition last, and only then acks. A run that fails before its manifest acks nothing:
the next run archives the same messages again (an interrupted backup stays as it was, ``completed_at: null``, until
retention removes it).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from airflow_rbak import __version__
from airflow_rbak.broker import journal as broker_journal
from airflow_rbak.broker.connection import RabbitMQConnection
from airflow_rbak.broker.journal import JournalError, JournalStatus
from airflow_rbak.broker.management import ManagementClient
from airflow_rbak.broker.pika_connection import blocking_connection, drop
from airflow_rbak.codec import BackupManifest, QueueBackup, SegmentWriter
from airflow_rbak.codec.constants import DEFAULT_SEGMENT_MAX_BYTES, DEFAULT_SEGMENT_MAX_INTERVAL_MS, Compression
from airflow_rbak.codec.journal_layout import JOURNAL_QUEUE
from airflow_rbak.display import package_logger
from airflow_rbak.journal.archives import JOURNAL, Newest, archive_id, newest_archive
from airflow_rbak.journal.drain import Drained, DrainLimits, JournalDrain
from airflow_rbak.repository.lock import BackupLock, LeasedStorage
from airflow_rbak.repository.manifest_store import ManifestStore
from airflow_rbak.repository.writer import QueueSegmentSink, now_ms
from airflow_rbak.storage import open_storage
from airflow_rbak.storage.base import Storage

log = package_logger(__name__)

#: A recovery point (now - the newest archived mark) over this is logged as a warning.
DEFAULT_RECOVERY_POINT_WARN_S = 900.0


@dataclass(frozen=True)
class ArchiveSettings:
    """Where and how one vhost's journal is archived."""

    vhost: str
    storage_url: str
    seconds: float = 60.0
    #: The consumer's prefetch, so at most this many messages per run (AMQP caps a prefetch at 65,535).
    max_messages: int = 50_000
    compression: Compression | str = Compression.ZSTD
    compression_level: int = 3
    segment_max_bytes: int = DEFAULT_SEGMENT_MAX_BYTES
    segment_max_interval_ms: int = DEFAULT_SEGMENT_MAX_INTERVAL_MS
    recovery_point_warn_s: float = DEFAULT_RECOVERY_POINT_WARN_S
    mark_every: float = 1.0

    def __post_init__(self) -> None:
        object.__setattr__(self, "compression", Compression.parse(self.compression))
        if not 0 < self.seconds <= 86_400 or not 0 < self.max_messages <= 65_535:
            raise JournalError("seconds must be in (0, 86400] and max_messages in 1..65,535 (a consumer's prefetch)")
        self.writer()

    def writer(self) -> SegmentWriter:
        return SegmentWriter(Compression.parse(self.compression), self.compression_level, self.segment_max_bytes,
                             self.segment_max_interval_ms)


@dataclass
class ArchiveResult:
    """What one run archived (the DAG task's XCom and the command's output)."""

    backup_id: str
    vhost: str
    previous: str | None
    from_ms: int
    to_ms: int
    messages: int
    redelivered: int
    gaps: list[dict[str, Any]]
    uncovered: list[str]
    recovery_point_ms: int
    stop_reason: str
    foreign: int = 0
    nodes: dict[str, str] = field(default_factory=dict)

    def summary(self) -> dict[str, Any]:
        return {"backup_id": self.backup_id, "vhost": self.vhost, "previous": self.previous, "from": self.from_ms,
                "to": self.to_ms, "messages": self.messages, "redelivered": self.redelivered, "gaps": self.gaps,
                "uncovered": self.uncovered, "recovery_point_ms": self.recovery_point_ms,
                "stop_reason": self.stop_reason, "foreign": self.foreign, "nodes": self.nodes}


class JournalArchive:
    """Archives one vhost's journal into one backup per :meth:`run`."""

    def __init__(self, connection: RabbitMQConnection, settings: ArchiveSettings, storage: Storage | None = None) -> None:
        self.connection = connection
        self.settings = settings
        self.storage = storage or open_storage(settings.storage_url)

    def run(self) -> ArchiveResult:
        settings = self.settings
        newest = newest_archive(self.storage, settings.vhost)
        started = now_ms()
        state = broker_journal.status(self.connection, settings.vhost)
        gaps = self.check_broker(state, newest, started)
        backup_id = archive_id(settings.vhost, started)
        lock = BackupLock(self.storage, backup_id, f"journal archive of {settings.vhost}")
        lock.acquire()
        try:
            with lock.renewing():
                result = self._archive(LeasedStorage(self.storage, lock), backup_id, newest, started, gaps, state)
        finally:
            lock.release()
        self._report(result)
        return result

    def check_broker(self, state: JournalStatus, newest: Newest, started: int) -> list[dict[str, Any]]:
        """The gaps the broker shows since the previous archive, each put right where it can be."""
        # Since the previous archive's end; before a first archive, since the journal's start (its first clock mark,
        # known once read: None here, filled in by _section).
        vhost, since = self.settings.vhost, newest.to
        gaps: list[dict[str, Any]] = []
        if newest.missing_previous:
            before = newest.before_missing.extensions[JOURNAL]["to"] if newest.before_missing else 0
            after = newest.manifest.extensions[JOURNAL]["from"] if newest.manifest else started
            gaps.append(_gap(before, after, f"archive {newest.missing_previous}, the previous of the newest archive, "
                                            "is missing"))
        if not state.queue_exists:
            # Never re-created here: an archive in the location is no permission to journal again (the queue may have
            # been deleted on purpose). The operator's enable publishes a start mark, and the gap is recorded then.
            if newest.manifest is None:
                raise JournalError(f"vhost {vhost!r} is not journaled (no {JOURNAL_QUEUE} queue): run `rbak journal enable`")
            raise JournalError(
                f"the journal queue {JOURNAL_QUEUE} of vhost {vhost!r} is missing (deleted, or the journal disabled "
                f"with its queue); the newest archive is {newest.manifest.backup_id} (to {newest.to}). Nothing was "
                "changed on the broker. Run `rbak journal enable` to journal the vhost again: the time since that "
                "archive's end will be recorded as a gap")
        if not state.bound:
            raise JournalError(f"the journal of vhost {vhost!r} is disabled (not bound to the firehose): run "
                               "`rbak journal enable` to archive it")
        off = [n for n in state.nodes if n.state == "off"]
        for node in off:
            gaps.append(_gap(since, started, f"tracing was off on node {node.node} (turned back on)"))
        for node in state.nodes:
            if node.state in ("unreachable", "unverified"):
                gaps.append(_gap(since, None, f"tracing {node.state} on node {node.node}"))
        if off:
            broker_journal.set_tracing(self.connection, vhost, True)
        if state.full:
            gaps.append(_gap(since, None, f"the journal was full ({state.depth} of {state.max_length} messages): "
                                          "its oldest trace messages were dropped"))
        return gaps

    def _archive(self, storage: Storage, backup_id: str, newest: Newest, started: int, gaps: list[dict[str, Any]],
                 state: JournalStatus) -> ArchiveResult:
        settings = self.settings
        manifests = ManifestStore(storage)
        with ManagementClient(self.connection) as client:
            manifest = BackupManifest(backup_id=backup_id, created_at=started, backup_tool_version=__version__,
                                      source_cluster=client.cluster_name(), rabbitmq_version=client.version())
        manifests.save(manifest)  # completed_at null: an interrupted run says so
        sink = QueueSegmentSink(storage, backup_id, QueueBackup(settings.vhost, JOURNAL_QUEUE, "quorum"),
                                settings.writer())
        limits = DrainLimits(settings.seconds, settings.max_messages, settings.mark_every)
        conn = blocking_connection(self.connection.pika_parameters_all(settings.vhost, "rbak journal archive"))
        try:
            channel, marks = conn.channel(), conn.channel()
            drained = JournalDrain(channel, marks, settings.vhost, sink.add, limits, newest.to).run()
            if drained.last_mark is None or drained.last_mark_tag is None:
                raise JournalError(f"no clock mark came through the journal of {settings.vhost!r} (stopped: "
                                   f"{drained.stop_reason}); is tracing on on the node the archiver connects to?")
            section = self._section(newest, drained, gaps, state)
            manifest.queues = [sink.close()]
            manifest.extensions[JOURNAL] = section
            manifest.extensions["left_out"] = []
            manifest.refresh_totals()
            manifest.completed_at = now_ms()
            self.store_manifest(manifests, manifest)
            for tag in drained.foreign:
                channel.basic_reject(tag, requeue=False)
            channel.basic_ack(drained.last_mark_tag, multiple=True)
            channel.basic_qos(prefetch_count=limits.max_messages)  # a round trip: the broker has taken the ack
        finally:
            drop(conn)  # what it did not ack goes back to the journal in its order (pika_connection.drop says why)
        return ArchiveResult(backup_id, settings.vhost, section["previous"], section["from"], section["to"],
                             drained.messages, drained.redelivered, section["gaps"], section["uncovered"],
                             now_ms() - section["to"], drained.stop_reason, len(drained.foreign),
                             {n.node: n.state for n in state.nodes})

    def store_manifest(self, manifests: ManifestStore, manifest: BackupManifest) -> None:
        """Store the completed manifest: the last write, after which the journal's messages are acked."""
        manifests.save(manifest)

    def _section(self, newest: Newest, drained: Drained, gaps: list[dict[str, Any]],
                 state: JournalStatus) -> dict[str, Any]:
        """The manifest's ``journal`` addition (docs/operations.md)."""
        assert drained.last_mark is not None and drained.first_mark is not None
        start = newest.to if newest.to is not None else (drained.first_seen_mark or drained.first_mark)
        gaps += drained.gaps
        if drained.records_before_first_mark:
            gaps.append(_gap(0, start, "records came before the journal's first clock mark: their publish time is "
                                       "unknown"))
        for gap in gaps:
            if gap["from"] is None:
                gap["from"] = start
            if gap["to"] is None and "full" in gap["reason"]:  # what was dropped came before the first mark kept
                gap["to"] = drained.first_seen_mark or drained.first_mark
        return {"vhost": self.settings.vhost, "previous": newest.manifest.backup_id if newest.manifest else None,
                "from": start, "to": drained.last_mark, "messages": drained.messages,
                "redelivered": drained.redelivered, "went_nowhere": drained.went_nowhere, "gaps": gaps,
                "uncovered": list(state.uncovered)}

    def _report(self, result: ArchiveResult) -> None:
        seconds = result.recovery_point_ms / 1000
        log.info("journal of %s archived as %s: %d messages (%d redelivered) up to %d; recovery point %.1fs (%s)",
                 result.vhost, result.backup_id, result.messages, result.redelivered, result.to_ms, seconds,
                 result.stop_reason)
        if seconds > self.settings.recovery_point_warn_s:
            log.warning("journal of %s: recovery point %.0fs is over %.0fs", result.vhost, seconds,
                        self.settings.recovery_point_warn_s)
        for gap in result.gaps:
            log.warning("journal of %s: gap from %s to %s: %s", result.vhost, gap["from"], gap["to"], gap["reason"])
        for what in result.uncovered:
            log.warning("journal of %s does not cover %s", result.vhost, what)


def _gap(start: int | None, end: int | None, reason: str) -> dict[str, Any]:
    return {"from": start, "to": end, "reason": reason}
