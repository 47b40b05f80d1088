"""A segment's framed records read as its payload is decompressed, one chunk at a time, never the payload whole.

Two readers stream records this way: the deep check, which keeps of each record only its count, timestamps and
source (:mod:`.record_summary`), and the message reader, which keeps the records it was asked for
(:func:`iter_record_batches`). The payload is decompressed once (:func:`~.compression.stream`) and runs of plainly
well-formed records are read by the C accelerator a call per run; a record it leaves alone is read by the Python
reader. Anything not plainly well formed (a defect of any kind, more records than the header states, or a record
too long to carry from one chunk to the next) hands the segment to the reference reader, ``decode_payload`` and
``iter_payload_records``, so every error is that reader's; a defective segment is then read twice.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from dataclasses import dataclass
from itertools import islice

from airflow_rbak.codec import records
from airflow_rbak.codec.compression import stream
from airflow_rbak.codec.constants import FOOTER_SIZE, HEADER_SIZE, LENGTH_PREFIX_SIZE
from airflow_rbak.codec.errors import CodecError
from airflow_rbak.codec.records import BackupRecord, RecordError, decode_record
from airflow_rbak.codec.segment import SegmentHeader, decode_payload, iter_payload_records

_LEN = struct.Struct("<I")
#: The longest record carried from one chunk to the next; a longer one goes to the reference reader.
CARRY_BYTES = 16 * 1024 * 1024
#: Records the message reader hands over at most at once (a run the accelerator reads in one call).
_BATCH = 1024
_I64_MIN, _I64_MAX = -(2**63), 2**63 - 1


class FramedChunks:
    """Reads framed records from a stream of chunks, carrying a record that spans two of them.

    Subclasses say what a run of records becomes (:meth:`_run`, the accelerated path) and what one record read
    by the Python reader becomes (:meth:`_one`); each keeps ``count`` up to date. :meth:`feed` and
    :meth:`complete` answer False where the reference reader must take over.
    """

    def __init__(self, expected: int) -> None:
        self.expected = expected
        self.count = 0
        self.carry = bytearray()  # the start of a record the next chunk completes

    def _run(self, buffer: bytes | bytearray | memoryview, pos: int) -> int:
        """Read the plainly well-formed records from ``pos`` on (none past ``expected``); the offset after them."""
        return pos

    def _one(self, record: BackupRecord) -> None:
        raise NotImplementedError

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
            pos = self._run(buffer, pos)
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
                    self._one(decode_record(view[start:pos]))
                except RecordError:
                    return None


@dataclass(frozen=True)
class Prefilter:
    """What every record a reader keeps must have, tested by the C accelerator as it parses the record, before
    building it: ``backed_up_at`` within [since, until], a body holding ``needle``, a routing key holding
    ``key_text``, and a header ``header_name`` that may equal ``header_text`` (None: any value; a value that is
    not text may, the caller's filter decides). Empty texts hold everywhere. Only records without it are left
    out: those kept must still meet the caller's filter."""

    needle: bytes = b""
    since: int = _I64_MIN
    until: int = _I64_MAX
    key_text: str = ""
    header_name: str = ""
    header_text: str | None = None


KEEP_ALL = Prefilter()


class _Batches(FramedChunks):
    """Keeps, as (index in the segment, record), the records that pass the prefilter, for the caller to take after
    each chunk."""

    def __init__(self, expected: int, prefilter: Prefilter) -> None:
        super().__init__(expected)
        self.prefilter = prefilter
        self.out: list[tuple[int, BackupRecord]] = []

    def _run(self, buffer: bytes | bytearray | memoryview, pos: int) -> int:
        select, p = records.accelerated_select, self.prefilter
        while select is not None and self.count < self.expected:
            pairs, pos, read = select(buffer, pos, min(self.expected - self.count, _BATCH), p.needle, p.since, p.until,
                                      p.key_text, p.header_name, p.header_text)
            if not read:
                break
            self.out.extend((self.count + index, record) for index, record in pairs)
            self.count += read
        return pos

    def _one(self, record: BackupRecord) -> None:
        self.out.append((self.count, record))
        self.count += 1

    def take(self) -> list[tuple[int, BackupRecord]]:
        out, self.out = self.out, []
        return out


def iter_record_batches(
    data: bytes | memoryview, header: SegmentHeader, name: str, cap: int, expected_size: int | None,
    prefilter: Prefilter = KEEP_ALL,
) -> Iterator[tuple[int, list[tuple[int, BackupRecord]]]]:
    """A segment's records in order, as (records read so far, the (index, record) pairs kept of them), its payload
    decompressed once and never held whole; records the prefilter rules out may be left out.

    ``header`` is the segment's, already read. A defect raises the reference reader's :class:`CodecError` after
    every record before it was yielded, as the reference reader would have yielded them.
    """
    reader = _Batches(header.record_count, prefilter)
    chunks = stream(memoryview(data)[HEADER_SIZE : len(data) - FOOTER_SIZE], header.compression, cap, name,
                    expected_size=expected_size)
    try:
        plain = True
        for chunk in chunks:
            plain = reader.feed(chunk)
            yield reader.count, reader.take()
            if not plain:
                break
        if plain and reader.complete():
            return
    except CodecError:
        pass  # the reference reader names the defect: it meets defects in another order
    finally:
        chunks.close()
    done = reader.count  # every record read so far was handed over
    header, payload = decode_payload(data, name, cap, expected_size=expected_size)
    batch: list[tuple[int, BackupRecord]] = []
    index = done
    try:
        for index, record in enumerate(islice(iter_payload_records(payload, header.record_count, name), done, None),
                                       start=done):
            batch.append((index, record))
            if len(batch) == _BATCH:
                yield index + 1, batch
                batch = []
    except CodecError:
        if batch:
            yield batch[-1][0] + 1, batch  # the records before the defect, then the defect
        raise
    if batch:
        yield index + 1, batch
