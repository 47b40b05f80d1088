"""Writes one queue's records into a backup as its numbered segments (the encode's sink), and the clock backups use.

The manifest that lists the segments is written after them, by the finalize step.
"""

from __future__ import annotations

import time

from airflow_rbak.codec import BackupRecord, EncodedSegment, QueueBackup, SegmentWriter
from airflow_rbak.codec.layout import segment_key
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
