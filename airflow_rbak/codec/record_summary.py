"""What a deep check needs of a segment's records: their count, timestamps and sources, read in one streaming pass.

A deep check reads every record as strictly as the reader does, but keeps of each only its ``backed_up_at`` and
whether it came from the queue the segment belongs to. So the payload is decompressed once, a chunk at a time
(:func:`~airflow_rbak.codec.compression.stream`), and its records are checked as they stream by: the C accelerator
checks runs of them without building objects (``scan_records``), the Python reader any record it leaves alone.
Anything not plainly well formed sends the segment to the reference reader, so every error and every result is
that reader's (:mod:`.record_stream`); a defective segment is then read twice.
"""

from __future__ import annotations

import struct
import sys
from collections.abc import Iterator
from dataclasses import dataclass

from airflow_rbak.codec import records
from airflow_rbak.codec.compression import stream
from airflow_rbak.codec.constants import FOOTER_SIZE, HEADER_SIZE, LENGTH_PREFIX_SIZE
from airflow_rbak.codec.errors import CodecError
from airflow_rbak.codec.record_stream import FramedChunks
from airflow_rbak.codec.records import BackupRecord
from airflow_rbak.codec.segment import SegmentHeader, decode_payload, iter_payload_records


@dataclass(frozen=True, slots=True)
class RecordSummary:
    """A payload's records as a deep check sees them; the timestamps are 0 when there are no records."""

    count: int
    #: Records whose source is not the vhost and queue the summary was asked for.
    foreign: int
    first: int
    last: int
    lowest: int
    highest: int

    @property
    def readings(self) -> tuple[tuple[int, int], tuple[int, int]]:
        """The (first, last) a header may state for these records: the first and last record's ``backed_up_at``,
        or, from a writer that keeps records out of time order, the smallest and largest (docs/format.md)."""
        return (self.first, self.last), (self.lowest, self.highest)


class FrameLengths:
    """The longest record frame of a payload, noted as the summary's pass streams by, so a reader that only needs to
    know whether any record is that long (the restore plan's large messages) does not decompress it again.

    ``longest`` is only known once ``finished``: the streaming pass read the whole payload (the reference reader,
    which decides a segment the pass cannot, does not note it)."""

    _LEN = struct.Struct("<I")  # the format's length prefix (docs/format.md)

    def __init__(self) -> None:
        self.longest = 0
        self.finished = False
        self._next = 0  # offset of the next length prefix
        self._offset = 0  # offset of the chunk being read
        self._partial = b""

    def chunk(self, view: memoryview) -> None:
        """Follow the length prefixes through one chunk, carrying a prefix split between two chunks."""
        size = len(view)
        if self._partial:
            self._partial += bytes(view[: LENGTH_PREFIX_SIZE - len(self._partial)])
            if len(self._partial) < LENGTH_PREFIX_SIZE:
                self._offset += size
                return
            self._frame(self._LEN.unpack(self._partial)[0])
            self._partial = b""
        while (rel := self._next - self._offset) < size:
            if rel + LENGTH_PREFIX_SIZE > size:
                self._partial = bytes(view[rel:])
                break
            self._frame(self._LEN.unpack_from(view, rel)[0])
        self._offset += size

    def _frame(self, length: int) -> None:
        self.longest = max(self.longest, length)
        self._next += LENGTH_PREFIX_SIZE + length


def summarize_payload(
    data: bytes | memoryview, header: SegmentHeader, name: str, cap: int, expected_size: int | None, vhost: str,
    queue: str, frames: FrameLengths | None = None,
) -> RecordSummary:
    """Check every record of a segment whose ``header`` was read; raises the reader's :class:`CodecError`.
    ``frames``, if given, notes the longest record frame on the way."""
    summary = _streamed(data, header, name, cap, expected_size, vhost, queue, frames)
    return summary if summary is not None else _reference(data, name, cap, expected_size, vhost, queue)


def _streamed(data: bytes | memoryview, header: SegmentHeader, name: str, cap: int, expected_size: int | None,
              vhost: str, queue: str, frames: FrameLengths | None = None) -> RecordSummary | None:
    """The summary from one streaming pass, or None: the reference reader decides (what this held is freed by then)."""
    scan = _Scan(header.record_count, vhost, queue)
    chunks = stream(memoryview(data)[HEADER_SIZE : len(data) - FOOTER_SIZE], header.compression, cap, name,
                    expected_size=expected_size)
    try:
        if all(scan.feed(chunk) for chunk in _noted(chunks, frames)) and scan.complete():
            if frames is not None:
                frames.finished = True
            return scan.summary()
    except CodecError:
        pass  # the reference reader names the defect: it meets defects in another order
    finally:
        chunks.close()
    return None


def _noted(chunks: Iterator[memoryview], frames: FrameLengths | None) -> Iterator[memoryview]:
    for chunk in chunks:
        if frames is not None:
            frames.chunk(chunk)
        yield chunk


def _reference(data: bytes | memoryview, name: str, cap: int, expected_size: int | None, vhost: str, queue: str) -> RecordSummary:
    header, payload = decode_payload(data, name, cap, expected_size=expected_size)
    tally = _Tally(vhost, queue)
    for record in iter_payload_records(payload, header.record_count, name):
        tally.add(record)
    return tally.summary()


class _Tally:
    """Counts records and keeps their timestamps' extremes."""

    def __init__(self, vhost: str, queue: str) -> None:
        self.vhost, self.queue = vhost, queue
        self.count = self.foreign = self.first = self.last = self.lowest = self.highest = 0

    def add(self, record: BackupRecord) -> None:
        stamp = record.backed_up_at
        self.merge(1, record.source_vhost != self.vhost or record.source_queue != self.queue, stamp, stamp, stamp, stamp)

    def merge(self, count: int, foreign: int, first: int, last: int, lowest: int, highest: int) -> None:
        """Add a run of ``count`` records that follows those counted so far."""
        if not count:
            return
        if not self.count:
            self.first, self.lowest, self.highest = first, lowest, highest
        self.lowest, self.highest = min(self.lowest, lowest), max(self.highest, highest)
        self.last = last
        self.count += count
        self.foreign += foreign

    def summary(self) -> RecordSummary:
        return RecordSummary(self.count, self.foreign, self.first, self.last, self.lowest, self.highest)


class _Scan(_Tally, FramedChunks):
    """Checks framed records as they stream by, tallying them; the C accelerator checks runs of them."""

    def __init__(self, expected: int, vhost: str, queue: str) -> None:
        _Tally.__init__(self, vhost, queue)
        FramedChunks.__init__(self, expected)

    def _run(self, buffer: bytes | bytearray | memoryview, pos: int) -> int:
        scan = records.accelerated_scan
        if scan is not None:
            # a header may state up to 2**64 - 1 records, more than C takes; a buffer holds far fewer
            pos, *run = scan(buffer, pos, min(self.expected - self.count, sys.maxsize), self.vhost, self.queue)
            self.merge(*run)
        return pos

    def _one(self, record: BackupRecord) -> None:
        self.add(record)
