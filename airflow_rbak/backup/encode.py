"""Seals a queue's staged chunks into its final segments (the encode job's unit of work).

Records keep capture order; segments are cut by the writer's rotation rules,
which depend only on the records, so encoding the same staging again yields
the same keys and the same bytes: a re-run after a crash overwrites segments
with identical copies and never leaves a gap or a duplicate.
"""

from __future__ import annotations

from collections.abc import Iterator

from airflow_rbak.backup.writer import QueueSegmentSink
from airflow_rbak.capture.staging import list_chunks
from airflow_rbak.codec import QueueBackup, SegmentWriter
from airflow_rbak.codec.constants import DEFAULT_MAX_DECOMPRESSED_BYTES
from airflow_rbak.codec.segment import decode_payload, iter_payload
from airflow_rbak.codec.staged_records import StagedRecordError, read_staged
from airflow_rbak.storage.base import Storage


def iter_staged_json(
    storage: Storage, keys: list[str], vhost: str, queue: str, cap: int = DEFAULT_MAX_DECOMPRESSED_BYTES
) -> Iterator[tuple[bytes, int]]:
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


def encode_queue(
    storage: Storage, backup_id: str, queue: QueueBackup, writer: SegmentWriter, chunk_keys: list[str] | None = None
) -> QueueBackup:
    """Encode one queue's staging into ``queues/{vhost}/{queue}/segment-NNNN``; return its manifest entry.

    ``chunk_keys`` are the chunks to seal (capture passes those its checkpoint accounts for); None: every staged one.
    """
    keys = chunk_keys if chunk_keys is not None else list_chunks(storage, backup_id, queue.vhost, queue.name)
    queue.segments.clear()
    sink = QueueSegmentSink(storage, backup_id, queue, writer)
    for raw, stamp in iter_staged_json(storage, keys, queue.vhost, queue.name):
        sink.add_encoded(raw, stamp)
    return sink.close()
