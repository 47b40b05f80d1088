"""The records a restore publishes for one queue: segments in sequence order, window applied, checked again.

The plan lists only segments holding a record inside the window; records
are filtered by ``backed_up_at`` one by one, in stored order, which the format
does not require to be time order. The bytes are
checked against the plan's SHA-256 once more, so a segment changed between
plan and publish is refused, not replayed; being the bytes the plan decoded
strictly, they are read through the fast path of :mod:`wire`.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from dataclasses import dataclass

from airflow_rbak.restore.errors import DamagedSegmentsError
from airflow_rbak.restore.plan import READ_ATTEMPTS, QueuePlan
from airflow_rbak.restore.request import RestoreRequest
from airflow_rbak.restore.wire import WireRecord, iter_wire_records, left_out_headers
from airflow_rbak.storage.base import Storage


@dataclass(frozen=True, slots=True)
class Positioned:
    """A record and its place in the backup: queue ordinal, segment key, index within the segment."""

    ordinal: int
    segment_key: str
    index: int
    record: WireRecord


def iter_window_records(
    storage: Storage, queue: QueuePlan, settings: RestoreRequest, start_ordinal: int = 0
) -> Iterator[Positioned]:
    """Yield the queue's records inside the window from ``start_ordinal`` on, in backup order."""
    left_out = left_out_headers(queue.queue_type)
    for segment in queue.segments:
        if segment.first_ordinal + segment.record_count <= start_ordinal:
            continue
        for _ in range(READ_ATTEMPTS):  # a body cut short in transfer looks the same as a change: read again
            data = storage.get(segment.key)
            digest = hashlib.sha256(data).hexdigest()
            if digest == segment.checksum:
                break
        else:
            raise DamagedSegmentsError(
                f"{segment.key} changed since the plan verified it (SHA-256 {digest}); plan the restore again",
                {segment.key: ["SHA-256 differs from the plan's"]})
        for index, record in enumerate(iter_wire_records(data, segment.key, settings.max_decompressed_bytes, left_out)):
            ordinal = segment.first_ordinal + index
            if ordinal >= start_ordinal and settings.in_window(record.backed_up_at):
                yield Positioned(ordinal, segment.key, index, record)
