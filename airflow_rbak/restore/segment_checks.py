"""The plan's verification of every segment it may publish, checked a few at a time while the next are read.

A segment's check (SHA-256, then decompressing and checking every record: ``repository.segment_check``) is most
of a plan's time, and its hashing and decompression run outside the GIL. So the segments are read one after
another, in the plan's order, on the calling thread (what a storage sees, and when, does not depend on threads),
and checked on up to :data:`CHECK_THREADS` threads behind the reads; results come back in the same order, so
everything the plan does with them (counts, selections, refusals) runs as if one checked after the other. At most
:data:`CHECK_THREADS` + 1 segments' bytes are held at a time (the one the plan is counting, those being checked and
the one being read), where a plan that checked one at a time held one or two.

A segment read back at another size than its manifest entry states is read again, up to :data:`READ_ATTEMPTS`
reads, before its check calls it damaged: a body cut short in transfer fails the same checks, and skipping an
intact segment would lose its records. Bytes of the right size that fail are damaged: read once.
"""

from __future__ import annotations

import os
from collections import deque
from collections.abc import Generator, Iterable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass

from airflow_rbak.codec import QueueBackup, SegmentMetadata
from airflow_rbak.codec.record_summary import FrameLengths
from airflow_rbak.repository.segment_check import SegmentCheck, check_segment_bytes
from airflow_rbak.storage.base import ObjectNotFoundError, Storage, StorageError

#: Reads of a segment before it is called damaged (a body cut short in transfer is not damage).
READ_ATTEMPTS = 3
#: Segments checked at once: a check holds the GIL for its record scan about as long as it releases it for hashing
#: and decompression, so a third thread gains little (measured: 4.2 s one at a time, 2.8 s two, 3.1 s three) and
#: holds one more segment.
CHECK_THREADS = 2 if (os.cpu_count() or 1) > 1 else 1


@dataclass(frozen=True)
class CheckedSegment:
    """One segment as its check found it; ``data`` is None unless it was read."""

    entry: QueueBackup
    meta: SegmentMetadata
    check: SegmentCheck
    data: bytes | None
    #: What the check noted of its record frames (the longest), so a reader of sizes need not decompress again.
    frames: FrameLengths


def checked_segments(storage: Storage, segments: Iterable[tuple[QueueBackup, SegmentMetadata]], cap: int,
                     threads: int = CHECK_THREADS) -> Generator[CheckedSegment, None, None]:
    """Each ``(queue entry, segment)`` read and completely checked, in the order given."""
    if threads <= 1:
        for entry, meta in segments:
            yield _checked(entry, meta, _read(storage, meta), cap)
        return
    pool = ThreadPoolExecutor(max_workers=threads, thread_name_prefix="rbak-plan-check")
    pending: deque[Future[CheckedSegment]] = deque()
    try:
        for entry, meta in segments:
            if len(pending) >= threads:
                yield pending.popleft().result()
            pending.append(pool.submit(_checked, entry, meta, _read(storage, meta), cap))
        while pending:
            yield pending.popleft().result()
    finally:  # the plan stopped early (a refusal): what is queued is not checked
        for future in pending:
            future.cancel()
        pool.shutdown(wait=True)


def _read(storage: Storage, meta: SegmentMetadata) -> bytes | str:
    """The segment's bytes (read again while their size is not the manifest's), or why they could not be read."""
    data = b""
    for _ in range(READ_ATTEMPTS):
        try:
            data = storage.get(meta.key)
        except ObjectNotFoundError:
            return "missing"
        except StorageError as exc:
            return f"cannot be read: {exc}"
        if len(data) == meta.size_bytes:
            break
    return data


def _checked(entry: QueueBackup, meta: SegmentMetadata, read: bytes | str, cap: int) -> CheckedSegment:
    check = SegmentCheck(meta.key, entry.vhost, entry.name, meta.sequence)
    frames = FrameLengths()
    if isinstance(read, str):
        check.defects.append(read)
        return CheckedSegment(entry, meta, check, None, frames)
    check_segment_bytes(read, entry.vhost, entry.name, meta, check, cap, frames)
    return CheckedSegment(entry, meta, check, read, frames)
