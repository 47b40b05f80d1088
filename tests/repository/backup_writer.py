"""A whole backup written from records, without a broker: segments per queue, definitions, then the manifest.

The tests build sample backups with it; a real backup is written by its steps (capture, encode, finalize).
The manifest is written last, so a backup that stops half way never claims segments it does not have; a
backup that stops before ``finish`` has no ``completed_at``.
"""

from __future__ import annotations

from collections.abc import Iterable

import orjson

from airflow_rbak import __version__
from airflow_rbak.codec import BackupManifest, BackupRecord, DefinitionsBackup, QueueBackup, SegmentWriter
from airflow_rbak.codec.compression import compress
from airflow_rbak.codec.constants import (
    DEFAULT_SEGMENT_MAX_BYTES,
    DEFAULT_SEGMENT_MAX_INTERVAL_MS,
    DEFAULT_ZSTD_LEVEL,
    Compression,
)
from airflow_rbak.codec.layout import check_backup_id, definitions_key
from airflow_rbak.repository.manifest_store import ManifestStore
from airflow_rbak.repository.writer import QueueSegmentSink, now_ms
from airflow_rbak.storage.base import Storage


class SampleSink(QueueSegmentSink):
    """A queue's sink that also takes a batch of records."""

    def add_all(self, records: Iterable[BackupRecord]) -> None:
        for record in records:
            self.add(record)


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

    def queue(self, vhost: str, name: str, queue_type: str = "classic") -> SampleSink:
        """A sink for one queue's records, added to the manifest when the backup finishes."""
        entry = QueueBackup(vhost=vhost, name=name, queue_type=queue_type)
        self.manifest.queues.append(entry)
        return SampleSink(self.storage, self.manifest.backup_id, entry, SegmentWriter(*self._writer_args))

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
