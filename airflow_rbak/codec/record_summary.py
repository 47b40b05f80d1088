"""What a deep check needs of a segment's records: their count, timestamps and sources, read in one streaming pass.

A deep check reads every record as strictly as the reader does, but keeps of each only its ``backed_up_at`` and
whether it came from the queue the segment belongs to. So the payload is decompressed once, a chunk at a time
(:func:`~airflow_rbak.codec.compression.stream`), and its records are checked as they stream by: the C accelerator
checks runs of them without building objects (``scan_records``), the Python reader any record it leaves alone.
Anything not plainly well formed (a defect of any kind, or a record too long to carry from one chunk to the next)
sends the segment to the reference reader, ``decode_payload`` and ``iter_payload_records``, so every error and
every result is that reader's; a defective segment is then read twice.
"""

from __future__ import annotations

import struct
import sys
from dataclasses import dataclass

from airflow_rbak.codec import records
from airflow_rbak.codec.compression import stream
from airflow_rbak.codec.constants import FOOTER_SIZE, HEADER_SIZE, LENGTH_PREFIX_SIZE
from airflow_rbak.codec.errors import CodecError
from airflow_rbak.codec.records import BackupRecord, RecordError, decode_record
from airflow_rbak.codec.segment import SegmentHeader, decode_payload, iter_payload_records

_LEN = struct.Struct("<I")
#: The longest record the streaming pass carries from one chunk to the next; a longer one goes to the reference reader.
CARRY_BYTES = 16 * 1024 * 1024


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


def summarize_payload(
    data: bytes | memoryview, header: SegmentHeader, name: str, cap: int, expected_size: int | None, vhost: str, queue: str
) -> RecordSummary:
    """Check every record of a segment whose ``header`` was read; raises the reader's :class:`CodecError`."""
    summary = _streamed(data, header, name, cap, expected_size, vhost, queue)
    return summary if summary is not None else _reference(data, name, cap, expected_size, vhost, queue)


def _streamed(data: bytes | memoryview, header: SegmentHeader, name: str, cap: int, expected_size: int | None,
              vhost: str, queue: str) -> RecordSummary | None:
    """The summary from one streaming pass, or None: the reference reader decides (what this held is freed by then)."""
    scan = _Scan(header.record_count, vhost, queue)
    chunks = stream(memoryview(data)[HEADER_SIZE : len(data) - FOOTER_SIZE], header.compression, cap, name,
                    expected_size=expected_size)
    try:
        if all(scan.feed(chunk) for chunk in chunks) and scan.complete():
            return scan.summary()
    except CodecError:
        pass  # the reference reader names the defect: it meets defects in another order
    finally:
        chunks.close()
    return None


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


class _Scan(_Tally):
    """Reads framed records from a stream of chunks, carrying a record that spans two of them.

    Its methods answer False where the reference reader must take over: a record that does not read, more
    records than the header states, a length prefix too short for a record or too long to carry.
    """

    def __init__(self, expected: int, vhost: str, queue: str) -> None:
        super().__init__(vhost, queue)
        self.expected = expected
        self.carry = bytearray()  # the start of a record the next chunk completes

    def feed(self, chunk: memoryview) -> bool:
        at = 0
        while self.carry:
            missing = self._missing()
            if missing is None:
                return False
            if missing:
                taken = chunk[at : at + missing]
                self.carry += taken
                at += len(taken)
                if len(taken) < missing:
                    return True
                continue
            if self._read(self.carry, 0) != len(self.carry):
                return False
            self.carry.clear()
        end = self._read(chunk, at)
        if end is None:
            return False
        self.carry += chunk[end:]
        return True

    def complete(self) -> bool:
        """Whether the stream ended after a whole record, with as many as the header states."""
        return not self.carry and self.count == self.expected

    def _missing(self) -> int | None:
        """Bytes the carried record still lacks, or None for a length no record may have here."""
        if len(self.carry) < LENGTH_PREFIX_SIZE:
            return LENGTH_PREFIX_SIZE - len(self.carry)
        (length,) = _LEN.unpack_from(self.carry)
        if not 2 <= length <= CARRY_BYTES:
            return None
        return LENGTH_PREFIX_SIZE + length - len(self.carry)

    def _read(self, buffer: bytes | bytearray | memoryview, pos: int) -> int | None:
        """Read the whole records from ``pos`` on; the offset of the first one ``buffer`` does not hold whole."""
        size = len(buffer)
        while True:
            scan = records.accelerated_scan
            if scan is not None:
                # a header may state up to 2**64 - 1 records, more than C takes; a buffer holds far fewer
                pos, *run = scan(buffer, pos, min(self.expected - self.count, sys.maxsize), self.vhost, self.queue)
                self.merge(*run)
            if size - pos < LENGTH_PREFIX_SIZE:
                return pos
            (length,) = _LEN.unpack_from(buffer, pos)
            if length > size - pos - LENGTH_PREFIX_SIZE:
                return pos
            if self.count == self.expected:
                return None
            start, pos = pos + LENGTH_PREFIX_SIZE, pos + LENGTH_PREFIX_SIZE + length
            with memoryview(buffer) as view:
                try:
                    self.add(decode_record(view[start:pos]))
                except RecordError:
                    return None
