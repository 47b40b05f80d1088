"""A backup's stored messages, read segment by segment in stored order, each with where it is stored.

What ``rbak messages`` prints, what ``rbak search`` looks through (in process and in each Spark task) and what
a view of a backup pages through. Every segment is read as ``rbak validate --deep`` reads it, because its
bytes are untrusted: only a key the manifest may name is fetched (:mod:`.ownership`), at most the size the
manifest lists; bytes whose SHA-256 differs from the manifest's are never decompressed (:func:`vouched_bytes`);
the payload may hold exactly the manifest's ``uncompressed_bytes`` and is checked by the codec's reader as it is
parsed. A segment that fails any of it is yielded as a :class:`DamagedSegment` naming it and why, and the
reading goes on with the next one: one bad object never hides the good ones.

Cost: what a deep check costs. The payload is decompressed once, as it streams by, and its records are parsed as
they come (:func:`~airflow_rbak.codec.record_stream.iter_record_batches`); the parser builds only the records
that may match (:meth:`~.message_filter.MessageFilter.prefilter`: the window, a text the body, the routing key or
a header must hold), and the filter tests those. A segment whose payload lacks a text an exact property needs
(:meth:`~.message_filter.MessageFilter.needles`, looked for a chunk at a time) is not parsed at all.

Memory: one segment at a time, its compressed bytes, a chunk of its payload and the records of that chunk that may
match. A reader that stops early (a ``--limit``) reads no further segment.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from dataclasses import dataclass

from airflow_rbak.codec import BackupManifest, CodecError, QueueBackup, SegmentMetadata
from airflow_rbak.codec.compression import stream
from airflow_rbak.codec.constants import DEFAULT_MAX_DECOMPRESSED_BYTES, FOOTER_SIZE, HEADER_SIZE
from airflow_rbak.codec.record_stream import iter_record_batches
from airflow_rbak.codec.records import BackupRecord
from airflow_rbak.codec.segment import SegmentHeader, read_header
from airflow_rbak.exceptions import RbakError
from airflow_rbak.repository.message_filter import MessageFilter
from airflow_rbak.repository.ownership import queue_defects
from airflow_rbak.storage.base import ObjectNotFoundError, Storage, StorageError, read_bounded

_EVERYTHING = MessageFilter()


@dataclass(frozen=True, slots=True)
class StoredPlace:
    """Where a record is stored: ``index`` in its segment, ``position`` in its queue (both from 0).

    ``position`` counts every record of the queue's segments in stored order (:meth:`QueueBackup.stored_order`),
    matching or not, so it names the same record however the messages were filtered, and the one a selective
    restore's ``positions`` names.
    """

    backup_id: str
    vhost: str
    queue: str
    segment: str
    sequence: int
    index: int
    position: int


@dataclass(frozen=True, slots=True)
class StoredMessage(StoredPlace):
    """One stored record and where it is."""

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
        for segment in entry.stored_order():
            yield entry, segment, position, foreign.get(segment.key)
            position += segment.record_count


def _may_hold(data: bytes, header: SegmentHeader, segment: SegmentMetadata, cap: int, needles: tuple[bytes, ...]) -> bool:
    """Whether the payload holds every needle, looked for as it is decompressed a chunk at a time (nothing
    payload-sized is allocated); a defect says True, so that the full reader meets it and names it."""
    missing, keep, tail = set(needles), max(len(n) for n in needles) - 1, b""
    chunks = stream(memoryview(data)[HEADER_SIZE : len(data) - FOOTER_SIZE], header.compression, cap, segment.key,
                    expected_size=segment.uncompressed_bytes)
    try:
        for chunk in chunks:
            window = tail + bytes(chunk)  # a chunk is valid only until the next: keep what a needle may straddle
            missing = {n for n in missing if n not in window}
            if not missing:
                return True
            tail = window[-keep:]
    except CodecError:
        return True
    finally:
        chunks.close()
    return False


class SegmentUnreadableError(RbakError):
    """A segment whose bytes are not the ones its manifest entry vouches for, or cannot be read; ``reason`` says why."""

    def __init__(self, key: str, reason: str) -> None:
        super().__init__(f"{key}: {reason}")
        self.reason = reason


def vouched_bytes(storage: Storage, segment: SegmentMetadata) -> bytes:
    """A segment's bytes, read only up to the size its manifest entry lists and returned only when their SHA-256 is
    the entry's: bytes the manifest does not vouch for are never decompressed."""
    try:
        data = read_bounded(storage, segment.key, segment.size_bytes, "its manifest entry says the segment")
    except ObjectNotFoundError:
        raise SegmentUnreadableError(segment.key, "missing") from None
    except StorageError as exc:
        raise SegmentUnreadableError(segment.key, f"cannot be read: {exc}") from None
    digest = hashlib.sha256(data).hexdigest()
    if digest != segment.checksum:
        raise SegmentUnreadableError(segment.key, f"SHA-256 is {digest}, manifest says {segment.checksum}; not read")
    return data


def read_segment_messages(
    storage: Storage, backup_id: str, vhost: str, queue: str, segment: SegmentMetadata, first_position: int,
    message_filter: MessageFilter = _EVERYTHING, cap: int = DEFAULT_MAX_DECOMPRESSED_BYTES,
) -> Iterator[StoredMessage | DamagedSegment]:
    """The matching records of one segment whose first record is at ``first_position`` in its queue; a defect
    ends it with a :class:`DamagedSegment`. A Spark task calls this for each segment it was dealt."""
    def damaged(reason: str, records_read: int = 0) -> DamagedSegment:
        return DamagedSegment(backup_id, vhost, queue, segment.key, segment.sequence, reason, records_read)

    try:
        data = vouched_bytes(storage, segment)
    except SegmentUnreadableError as exc:
        yield damaged(exc.reason)
        return
    read = 0
    try:
        header = read_header(data, segment.key)
        if header.record_count != segment.record_count:
            yield damaged(f"header holds {header.record_count} records, manifest says {segment.record_count}; not read")
            return
        needles = message_filter.needles()
        if needles and not _may_hold(data, header, segment, cap, needles):
            return  # no record here can match: its bytes are the ones the manifest vouches for, not parsed
        keep = message_filter.select
        for count, batch in iter_record_batches(data, header, segment.key, cap, segment.uncompressed_bytes,
                                                message_filter.prefilter()):
            for index, record in keep(batch):
                read = index + 1  # a defect in the batch's reading comes after its records
                yield StoredMessage(backup_id, vhost, queue, segment.key, segment.sequence, index,
                                    first_position + index, record)
            read = count
    except CodecError as exc:
        yield damaged(exc.reason + (f" at byte {exc.offset}" if exc.offset is not None else ""), read)
