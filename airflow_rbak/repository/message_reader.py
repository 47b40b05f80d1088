"""A backup's stored messages, read segment by segment in stored order, each with where it is stored.

What ``rbak messages`` prints, what ``rbak search`` looks through (in process and in each Spark task) and what
a view of a backup pages through. Every segment is read as ``rbak validate --deep`` reads it, because its
bytes are untrusted: only a key the manifest may name is fetched (:mod:`.ownership`), at most the size the
manifest lists; bytes whose SHA-256 differs from the manifest's are never decompressed; the payload may hold
exactly the manifest's ``uncompressed_bytes`` and is checked by the codec's reader as it is parsed. A segment
that fails any of it is yielded as a :class:`DamagedSegment` naming it and why, and the reading goes on with
the next one: one bad object never hides the good ones.

Memory: one segment at a time, its compressed bytes and its payload (at most the manifest's sizes and the
``cap``); records are decoded as they are yielded. A reader that stops early (a ``--limit``) reads no further
segment.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from dataclasses import dataclass

from airflow_rbak.codec import BackupManifest, CodecError, QueueBackup, SegmentMetadata
from airflow_rbak.codec.constants import DEFAULT_MAX_DECOMPRESSED_BYTES
from airflow_rbak.codec.records import BackupRecord
from airflow_rbak.codec.segment import decode_payload, iter_payload_records, read_header
from airflow_rbak.repository.message_filter import MessageFilter
from airflow_rbak.repository.ownership import queue_defects
from airflow_rbak.storage.base import ObjectNotFoundError, Storage, StorageError, read_bounded

_EVERYTHING = MessageFilter()


@dataclass(frozen=True, slots=True)
class StoredMessage:
    """One stored record and where it is: ``index`` in its segment, ``position`` in its queue (both from 0).

    ``position`` counts every record of the queue's segments in the manifest's order, matching or not, so it
    names the same record however the messages were filtered.
    """

    backup_id: str
    vhost: str
    queue: str
    segment: str
    sequence: int
    index: int
    position: int
    record: BackupRecord


@dataclass(frozen=True, slots=True)
class DamagedSegment:
    """A segment that could not be read, and why; ``records_read`` records of it were read before the defect."""

    backup_id: str
    vhost: str
    queue: str
    segment: str
    sequence: int
    reason: str
    records_read: int = 0

    def __str__(self) -> str:
        read = f" ({self.records_read} records read before it)" if self.records_read else ""
        return f"{self.segment}: {self.reason}{read}"


def read_messages(
    storage: Storage, manifest: BackupManifest, *, vhost: str | None = None, queue: str | None = None,
    message_filter: MessageFilter = _EVERYTHING, cap: int = DEFAULT_MAX_DECOMPRESSED_BYTES,
) -> Iterator[StoredMessage | DamagedSegment]:
    """The matching records of a backup's queues (all, or the one vhost and/or queue named), in stored order,
    and each damaged segment where it would have been read."""
    for entry, segment, first_position, defect in queue_segments(manifest, vhost=vhost, queue=queue):
        if defect is not None:
            yield DamagedSegment(manifest.backup_id, entry.vhost, entry.name, segment.key, segment.sequence, defect)
        else:
            yield from read_segment_messages(storage, manifest.backup_id, entry.vhost, entry.name, segment,
                                             first_position, message_filter, cap)


def queue_segments(
    manifest: BackupManifest, *, vhost: str | None = None, queue: str | None = None,
) -> Iterator[tuple[QueueBackup, SegmentMetadata, int, str | None]]:
    """Each segment of the chosen queues in stored order: its queue, itself, the queue position of its first
    record, and why it may not be read (a key outside the backup and its declared bases) or None."""
    for entry in manifest.queues:
        if (vhost is not None and entry.vhost != vhost) or (queue is not None and entry.name != queue):
            continue
        foreign = queue_defects(manifest, entry)
        position = 0
        for segment in entry.segments:
            yield entry, segment, position, foreign.get(segment.key)
            position += segment.record_count


def read_segment_messages(
    storage: Storage, backup_id: str, vhost: str, queue: str, segment: SegmentMetadata, first_position: int,
    message_filter: MessageFilter = _EVERYTHING, cap: int = DEFAULT_MAX_DECOMPRESSED_BYTES,
) -> Iterator[StoredMessage | DamagedSegment]:
    """The matching records of one segment whose first record is at ``first_position`` in its queue; a defect
    ends it with a :class:`DamagedSegment`. A Spark task calls this for each segment it was dealt."""
    def damaged(reason: str, records_read: int = 0) -> DamagedSegment:
        return DamagedSegment(backup_id, vhost, queue, segment.key, segment.sequence, reason, records_read)

    try:
        data = read_bounded(storage, segment.key, segment.size_bytes, "its manifest entry says the segment")
    except ObjectNotFoundError:
        yield damaged("missing")
        return
    except StorageError as exc:
        yield damaged(f"cannot be read: {exc}")
        return
    digest = hashlib.sha256(data).hexdigest()
    if digest != segment.checksum:  # bytes the manifest does not vouch for are not decompressed
        yield damaged(f"SHA-256 is {digest}, manifest says {segment.checksum}; not read")
        return
    read = 0
    try:
        header = read_header(data, segment.key)
        if header.record_count != segment.record_count:
            yield damaged(f"header holds {header.record_count} records, manifest says {segment.record_count}; not read")
            return
        header, payload = decode_payload(data, segment.key, cap, expected_size=segment.uncompressed_bytes)
        del data
        for index, record in enumerate(iter_payload_records(payload, header.record_count, segment.key)):
            read = index + 1
            if message_filter.matches(record):
                yield StoredMessage(backup_id, vhost, queue, segment.key, segment.sequence, index,
                                    first_position + index, record)
    except CodecError as exc:
        yield damaged(exc.reason + (f" at byte {exc.offset}" if exc.offset is not None else ""), read)
