"""The records a restore publishes for one queue: segments in sequence order, window and selection applied, checked
again.

The plan lists only segments holding a record inside the window; records
are filtered by ``backed_up_at`` one by one, in stored order, which the format
does not require to be time order. The bytes are
checked against the plan's SHA-256 once more, so a segment changed between
plan and publish is refused, not replayed; being the bytes the plan decoded
strictly, they are read through the fast path of :mod:`wire`. A selective
restore publishes only the positions its plan resolved (:mod:`.selection`); a
dead-letter replay also reads each record's typed headers, for its route.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from dataclasses import dataclass

from airflow_rbak.codec import BackupRecord, iter_records
from airflow_rbak.restore import journal_recovery
from airflow_rbak.restore.dead_letters import DeathHeaderError, death_route
from airflow_rbak.restore.errors import DamagedSegmentsError
from airflow_rbak.restore.plan import QueuePlan
from airflow_rbak.restore.request import RestoreRequest
from airflow_rbak.restore.segment_checks import READ_ATTEMPTS
from airflow_rbak.restore.selection import Ranges
from airflow_rbak.restore.wire import WireRecord, iter_wire_records, left_out_headers
from airflow_rbak.storage.base import Storage


@dataclass(frozen=True, slots=True)
class Positioned:
    """A record and its place in the backup: queue ordinal, segment key, index within the segment."""

    ordinal: int
    segment_key: str
    index: int
    record: WireRecord
    #: Dead-letter replay: the exchange and routing key of the record's most recent death (:mod:`.dead_letters`).
    route: tuple[str, str] | None = None


def iter_window_records(
    storage: Storage, queue: QueuePlan, request: RestoreRequest, start_ordinal: int = 0
) -> Iterator[Positioned]:
    """Yield the queue's records inside the window from ``start_ordinal`` on, in backup order (a journal entry's:
    :func:`.journal_recovery.iter_journal_records`)."""
    if queue.journal_archive is not None:
        for ordinal, key, index, record, route in journal_recovery.iter_journal_records(storage, queue, request,
                                                                                       start_ordinal):
            yield Positioned(ordinal, key, index, record, route)
        return
    left_out = left_out_headers(queue.queue_type)
    selected = None if queue.selected is None else Ranges(queue.selected)
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
        records = iter_wire_records(data, segment.key, request.max_decompressed_bytes, left_out)
        typed = iter_records(data, segment.key, request.max_decompressed_bytes) if queue.replay else None
        for index, record in enumerate(records):
            ordinal = segment.first_ordinal + index
            full = next(typed) if typed is not None else None  # the same record, with its typed headers
            if ordinal >= start_ordinal and request.in_window(record.backed_up_at) and (
                    selected is None or ordinal in selected):
                yield Positioned(ordinal, segment.key, index, record, None if full is None else _route(full, segment.key, index))


def _route(record: BackupRecord, key: str, index: int) -> tuple[str, str]:
    """The replay route the plan counted for this record (the bytes are the plan's: a failure here is a change)."""
    try:
        return death_route(record.headers)
    except DeathHeaderError as exc:
        raise DamagedSegmentsError(f"record {index} of {key} has no replay route although the plan found one ({exc}); "
                                   "plan the restore again", {key: [str(exc)]}) from None
