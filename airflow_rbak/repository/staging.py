"""Staging: a queue's captured deliveries as small RBAK files, named in capture order.

``{backup_id}/staging/{vhost}/{queue}/chunk-00000001.zst``: eight digits so
that a plain key sort is capture order. Each chunk is a complete RBAK
segment (header, framing, CRC, compression: docs/format.md), so the encode job
reads it with the ordinary decoder; its records are the deliveries as
received (``staged_delivery.py``), which encode makes into record JSON.

Read back (:func:`iter_staged_json`), a queue's staged chunks are record JSON in capture order: what the segment
stages seal.

Every chunk is checked whole (framing, CRC-32, record count) before its records are read, so damaged staging
stops an encode with the chunk's key rather than sealing part of it.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Generator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from airflow_rbak.codec.constants import DEFAULT_MAX_DECOMPRESSED_BYTES, Compression
from airflow_rbak.codec.layout import staging_prefix
from airflow_rbak.codec.segment import decode_payload, encode_payload, iter_payload
from airflow_rbak.codec.staged_records import StagedRecordError, read_staged
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
    #: What the writer's ``seal_state`` returned when the chunk was closed (the caller's counts at its last record).
    state: Any = None


class StagingWriter:
    """Buffers framed records and stores a chunk every ``max_records`` records or ``max_bytes`` bytes.

    ``on_chunk`` runs after each chunk is stored (the capture commits its
    checkpoint there). With ``background=True`` one thread compresses and
    stores the chunks, in order, while the caller goes on adding records:
    memory then holds the chunk being stored and the one being filled, and
    ``on_chunk`` runs on that thread, so what it needs from the caller comes
    from ``seal_state``, called when the chunk is closed. :meth:`flush`
    waits for every chunk and raises a failed store's error; :meth:`close`
    stops the thread.
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
        seal_state: Callable[[], Any] | None = None,
        background: bool = False,
    ) -> None:
        if max_records < 1 or max_bytes < 1:
            raise ConfigurationError("chunk limits must be positive")
        self.storage, self.backup_id, self.vhost, self.queue = storage, backup_id, vhost, queue
        self.sequence = next_sequence
        self.compression = Compression.parse(compression)
        self.level = level
        self.max_records, self.max_bytes = max_records, max_bytes
        self.on_chunk, self.seal_state = on_chunk, seal_state
        # Records are framed into a buffer that is reused, two of them in the background (one filling, one being
        # stored): a fresh buffer grown record by record was copied over and over and cost more than compressing.
        self._buffer, self._spare = bytearray(), bytearray()
        self._size = 0
        self._count = 0
        self._first = self._last = 0
        self.chunks_written = 0
        self._thread = ThreadPoolExecutor(1, thread_name_prefix="rbak-staging") if background else None
        self._storing: Future[StagedChunk] | None = None

    def add(self, record: bytes, backed_up_at: int) -> StagedChunk | None:
        """Add one staged record (``staged_delivery.py``); return the chunk this addition stored, if any (always
        None in the background: the chunk is handed to the staging thread, and ``on_chunk`` reports it once stored)."""
        if not self._count:
            self._first = backed_up_at
        self._last = backed_up_at
        start, end = self._size, self._size + 4 + len(record)
        if end > len(self._buffer):
            self._buffer.extend(bytes(max(end, self.max_bytes) - len(self._buffer)))
        _LEN.pack_into(self._buffer, start, len(record))
        self._buffer[start + 4 : end] = record
        self._size = end
        self._count += 1
        if self._count >= self.max_records or end >= self.max_bytes:
            return self.flush(wait=False)
        return None

    @property
    def pending_records(self) -> int:
        return self._count

    def flush(self, wait: bool = True) -> StagedChunk | None:
        """Store what is buffered as the next chunk (nothing when empty); return it unless in the background.

        In the background, ``wait=False`` only hands the chunk over (after the previous one is stored).
        """
        sealed = self._seal()
        if self._thread is None:
            return None if sealed is None else self._store(*sealed)
        self._wait()  # the spare buffer is free again once the chunk it holds is stored
        if sealed is not None:
            self._storing = self._thread.submit(self._store, *sealed)
            self._buffer, self._spare = self._spare, self._buffer
        if wait:
            self._wait()
        return None

    def close(self) -> None:
        """Let a chunk being stored finish, and stop the thread (its error, if any, is :meth:`flush`'s to raise)."""
        if self._thread is not None:
            self._thread.shutdown(wait=True)

    def _wait(self) -> None:
        storing, self._storing = self._storing, None
        if storing is not None:
            storing.result()

    def _seal(self) -> tuple[memoryview, int, int, int, int, Any] | None:
        if not self._count:
            return None
        state = self.seal_state() if self.seal_state else None
        sealed = (memoryview(self._buffer)[: self._size], self._count, self._first, self._last, self.sequence, state)
        self.sequence += 1
        self._size = self._count = 0
        return sealed

    def _store(self, payload: memoryview, count: int, first: int, last: int, sequence: int, state: Any) -> StagedChunk:
        with payload:  # released once encoded, so that its buffer may grow again
            segment = encode_payload(payload, count, first, last, self.compression, self.level)
            size = len(payload)
        key = chunk_key(self.backup_id, self.vhost, self.queue, sequence, self.compression)
        self.storage.put(key, segment.data)
        chunk = StagedChunk(key, sequence, count, len(segment.data), size, state)
        self.chunks_written += 1
        if self.on_chunk is not None:
            self.on_chunk(chunk)
        return chunk


def list_chunks(storage: Storage, backup_id: str, vhost: str, queue: str) -> list[str]:
    """Keys of a queue's staged chunks in capture order (their names sort that way)."""
    return sorted(info.key for info in storage.list(staging_prefix(backup_id, vhost, queue)) if "/chunk-" in info.key)


def delete_staging(storage: Storage, backup_id: str, vhost: str, queue: str) -> int:
    """Remove a queue's staged chunks (once the manifest that lists their segments is stored); return how many."""
    keys = list_chunks(storage, backup_id, vhost, queue)
    for key in keys:
        storage.delete(key)
    return len(keys)


def iter_staged_json(
    storage: Storage, keys: list[str], vhost: str, queue: str, cap: int = DEFAULT_MAX_DECOMPRESSED_BYTES
) -> Generator[tuple[bytes, int], None, None]:
    """Yield each staged record's JSON (``codec/staged_records.py``) and ``backed_up_at``, every chunk fully
    checked first."""
    for key in keys:
        header, payload = decode_payload(storage.get(key), key, cap)
        for index, staged in enumerate(iter_payload(payload, header.record_count, key)):
            try:
                made = read_staged(staged, queue, vhost)
            except StagedRecordError as exc:
                raise StagedRecordError(f"{key}: record {index}: {exc}") from None
            yield made
