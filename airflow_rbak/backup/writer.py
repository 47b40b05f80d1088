"""Writes a complete backup from records: segments per queue, definitions, then the manifest.

The manifest is written last, so a backup that stops half way never claims
segments it does not have; a backup that stops before ``finish`` has no
``completed_at``.
"""

from __future__ import annotations

import time
from collections.abc import Iterable

import orjson

from airflow_rbak import __version__
from airflow_rbak.backup.manifest_store import ManifestStore
from airflow_rbak.codec import BackupManifest, BackupRecord, DefinitionsBackup, EncodedSegment, QueueBackup, SegmentWriter
from airflow_rbak.codec.compression import compress
from airflow_rbak.codec.constants import (
    DEFAULT_SEGMENT_MAX_BYTES,
    DEFAULT_SEGMENT_MAX_INTERVAL_MS,
    DEFAULT_ZSTD_LEVEL,
    Compression,
)
from airflow_rbak.codec.layout import check_backup_id, definitions_key, segment_key
from airflow_rbak.storage.base import Storage


def now_ms() -> int:
    return int(time.time() * 1000)


class QueueSegmentSink:
    """Streams one queue's records into stored segments, numbered from 1."""

    def __init__(self, storage: Storage, backup_id: str, queue: QueueBackup, writer: SegmentWriter) -> None:
        self.storage = storage
        self.backup_id = backup_id
        self.queue = queue
        self.writer = writer

    def add(self, record: BackupRecord) -> None:
        for segment in self.writer.add(record):
            self._store(segment)

    def add_encoded(self, record_json: bytes | memoryview, backed_up_at: int) -> None:
        """Add a record already in its JSON form (re-encoding staged records skips a serialise)."""
        for segment in self.writer.add_encoded(record_json, backed_up_at):
            self._store(segment)

    def add_all(self, records: Iterable[BackupRecord]) -> None:
        for record in records:
            self.add(record)

    def close(self) -> QueueBackup:
        """Seal the last segment and return the queue's manifest entry with its totals."""
        last = self.writer.flush()
        if last is not None:
            self._store(last)
        self.queue.refresh_totals()
        return self.queue

    def _store(self, segment: EncodedSegment) -> None:
        sequence = len(self.queue.segments) + 1
        key = segment_key(self.backup_id, self.queue.vhost, self.queue.name, sequence, self.writer.compression)
        self.storage.put(key, segment.data)
        self.queue.segments.append(segment.metadata(key, sequence))


class BackupWriter:
    """Builds one backup in storage; call :meth:`finish` to write the completed manifest."""

    def __init__(
        self,
        storage: Storage,
        backup_id: str,
        *,
        compression: Compression | str = Compression.ZSTD,
        level: int = DEFAULT_ZSTD_LEVEL,
        segment_max_bytes: int = DEFAULT_SEGMENT_MAX_BYTES,
        segment_max_interval_ms: int = DEFAULT_SEGMENT_MAX_INTERVAL_MS,
        source_cluster: str | None = None,
        rabbitmq_version: str | None = None,
    ) -> None:
        self.storage = storage
        self.compression = Compression.parse(compression)
        self._writer_args = (self.compression, level, segment_max_bytes, segment_max_interval_ms)
        SegmentWriter(*self._writer_args)  # validate the settings before any I/O
        self.manifest = BackupManifest(
            backup_id=check_backup_id(backup_id),
            created_at=now_ms(),
            backup_tool_version=__version__,
            source_cluster=source_cluster,
            rabbitmq_version=rabbitmq_version,
        )

    def queue(self, vhost: str, name: str, queue_type: str = "classic") -> QueueSegmentSink:
        """A sink for one queue's records, added to the manifest when the backup finishes."""
        entry = QueueBackup(vhost=vhost, name=name, queue_type=queue_type)
        self.manifest.queues.append(entry)
        return QueueSegmentSink(self.storage, self.manifest.backup_id, entry, SegmentWriter(*self._writer_args))

    def write_definitions(self, definitions_json: bytes, level: int = DEFAULT_ZSTD_LEVEL) -> DefinitionsBackup:
        """Store the definitions export compressed like the segments, with its counts."""
        parsed = orjson.loads(definitions_json)
        key = definitions_key(self.manifest.backup_id, self.compression)
        self.storage.put(key, compress(definitions_json, self.compression, level))
        self.manifest.definitions = DefinitionsBackup.of(key, parsed, len(definitions_json))
        return self.manifest.definitions

    def finish(self) -> BackupManifest:
        """Write the manifest with its totals and ``completed_at``; the last write of a backup."""
        self.manifest.refresh_totals()
        self.manifest.completed_at = now_ms()
        ManifestStore(self.storage).save(self.manifest)
        return self.manifest
