"""Staging: a queue's captured records as small RBAK files, named in capture order.

``{backup_id}/staging/{vhost}/{queue}/chunk-00000001.zst``: eight digits so
that a plain key sort is capture order. Each chunk is a complete RBAK
segment (spec 000), so the encode job reads it with the ordinary decoder.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from dataclasses import dataclass

from airflow_rbak.codec.constants import Compression
from airflow_rbak.codec.layout import staging_prefix
from airflow_rbak.codec.segment import encode_payload
from airflow_rbak.exceptions import ConfigurationError
from airflow_rbak.storage.base import Storage

_LEN = struct.Struct("<I")
DEFAULT_CHUNK_RECORDS = 5000
DEFAULT_CHUNK_BYTES = 8 * 1024 * 1024


def chunk_key(backup_id: str, vhost: str, queue: str, sequence: int, compression: Compression) -> str:
    """The storage key of staged chunk ``sequence`` (from 1)."""
    if sequence < 1:
        raise ConfigurationError(f"chunk sequence numbers start at 1, got {sequence}")
    return f"{staging_prefix(backup_id, vhost, queue)}chunk-{sequence:08d}{compression.extension}"


@dataclass(frozen=True)
class StagedChunk:
    """What was stored for one chunk."""

    key: str
    sequence: int
    record_count: int
    size_bytes: int
    uncompressed_bytes: int


class StagingWriter:
    """Buffers framed records and stores a chunk every ``max_records`` records or ``max_bytes`` bytes.

    ``on_chunk`` runs after each chunk is stored (the capture commits its
    checkpoint there), so memory holds at most one chunk.
    """

    def __init__(
        self,
        storage: Storage,
        backup_id: str,
        vhost: str,
        queue: str,
        *,
        next_sequence: int = 1,
        compression: Compression = Compression.ZSTD,
        level: int = 1,
        max_records: int = DEFAULT_CHUNK_RECORDS,
        max_bytes: int = DEFAULT_CHUNK_BYTES,
        on_chunk: Callable[[StagedChunk], None] | None = None,
    ) -> None:
        if max_records < 1 or max_bytes < 1:
            raise ConfigurationError("chunk limits must be positive")
        self.storage, self.backup_id, self.vhost, self.queue = storage, backup_id, vhost, queue
        self.sequence = next_sequence
        self.compression = Compression.parse(compression)
        self.level = level
        self.max_records, self.max_bytes = max_records, max_bytes
        self.on_chunk = on_chunk
        self._payload = bytearray()
        self._count = 0
        self._first = self._last = 0
        self.chunks_written = 0

    def add(self, record_json: bytes, backed_up_at: int) -> StagedChunk | None:
        """Add one record's JSON; return the chunk this addition stored, if any."""
        if not self._count:
            self._first = backed_up_at
        self._last = backed_up_at
        self._payload += _LEN.pack(len(record_json))
        self._payload += record_json
        self._count += 1
        if self._count >= self.max_records or len(self._payload) >= self.max_bytes:
            return self.flush()
        return None

    @property
    def pending_records(self) -> int:
        return self._count

    def flush(self) -> StagedChunk | None:
        """Store what is buffered as the next chunk (nothing when empty)."""
        if not self._count:
            return None
        segment = encode_payload(self._payload, self._count, self._first, self._last, self.compression, self.level)
        key = chunk_key(self.backup_id, self.vhost, self.queue, self.sequence, self.compression)
        self.storage.put(key, segment.data)
        chunk = StagedChunk(key, self.sequence, self._count, len(segment.data), len(self._payload))
        self.sequence += 1
        self.chunks_written += 1
        self._payload = bytearray()
        self._count = 0
        if self.on_chunk is not None:
            self.on_chunk(chunk)
        return chunk


def list_chunks(storage: Storage, backup_id: str, vhost: str, queue: str) -> list[str]:
    """Keys of a queue's staged chunks in capture order."""
    return [info.key for info in storage.list(staging_prefix(backup_id, vhost, queue)) if "/chunk-" in info.key]


def delete_staging(storage: Storage, backup_id: str, vhost: str, queue: str) -> int:
    """Remove a queue's staged chunks (after the encode job sealed them into segments)."""
    keys = list_chunks(storage, backup_id, vhost, queue)
    for key in keys:
        storage.delete(key)
    return len(keys)
