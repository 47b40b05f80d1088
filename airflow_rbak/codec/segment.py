"""RBAK v1 segments (docs/format.md): a 32-byte header, a compressed payload of
length-prefixed JSON records, and a CRC-32 + ``KABR`` footer.

The reader checks every length before it allocates and raises a typed
:class:`~airflow_rbak.codec.errors.CodecError` naming the segment for each
defect; it never trusts the header's record count or a length prefix.
"""

from __future__ import annotations

import hashlib
import struct
import zlib
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

from airflow_rbak.codec import errors, records
from airflow_rbak.codec.compression import _chunks, compress, decompress
from airflow_rbak.codec.constants import (
    DEFAULT_MAX_DECOMPRESSED_BYTES,
    DEFAULT_ZSTD_LEVEL,
    END_MAGIC,
    FOOTER_SIZE,
    FORMAT_VERSION,
    HEADER_SIZE,
    LENGTH_PREFIX_SIZE,
    MAGIC,
    Compression,
)
from airflow_rbak.codec.manifest import SegmentMetadata
from airflow_rbak.codec.records import BackupRecord, RecordError, decode_record, encode_record
from airflow_rbak.exceptions import ConfigurationError

_HEADER = struct.Struct("<4sBB2sQqq")
_FOOTER = struct.Struct("<I4s")
_LEN = struct.Struct("<I")
#: Records decoded per call of the C accelerator: bounds what a streaming reader holds at once.
_BATCH = 1024


@dataclass(frozen=True, slots=True)
class SegmentHeader:
    """The fixed 32-byte header; timestamps are ``backed_up_at`` of the first and last record."""

    compression: Compression
    record_count: int
    first_timestamp: int
    last_timestamp: int
    version: int = FORMAT_VERSION

    def pack(self) -> bytes:
        """The header's 32 bytes, reserved bytes zero."""
        return _HEADER.pack(
            MAGIC, self.version, int(self.compression), b"\0\0", self.record_count, self.first_timestamp, self.last_timestamp
        )


@dataclass(frozen=True, slots=True)
class EncodedSegment:
    """A finished segment's bytes and what the manifest needs to know of them."""

    data: bytes
    header: SegmentHeader
    uncompressed_bytes: int
    sha256: str

    @property
    def record_count(self) -> int:
        return self.header.record_count

    @property
    def first_timestamp(self) -> int | None:
        return self.header.first_timestamp if self.header.record_count else None

    @property
    def last_timestamp(self) -> int | None:
        return self.header.last_timestamp if self.header.record_count else None

    def metadata(self, key: str, sequence: int) -> SegmentMetadata:
        """The manifest entry for this segment stored at ``key``."""
        return SegmentMetadata(
            key=key,
            sequence=sequence,
            record_count=self.record_count,
            size_bytes=len(self.data),
            uncompressed_bytes=self.uncompressed_bytes,
            first_timestamp=self.first_timestamp,
            last_timestamp=self.last_timestamp,
            checksum=self.sha256,
        )


@dataclass(frozen=True, slots=True)
class DecodedSegment:
    """A segment read back: its header and its records in stored order."""

    header: SegmentHeader
    records: list[BackupRecord]
    uncompressed_bytes: int


def check_level(compression: Compression, level: int) -> int:
    """Validate a compression level (zstd 1-22); other algorithms take none and ignore it."""
    if compression is Compression.ZSTD and not (isinstance(level, int) and 1 <= level <= 22):
        raise ConfigurationError(f"zstd compression level must be 1-22, got {level!r}")
    return level


def frame_record(record: BackupRecord) -> bytes:
    """One record with its u32 length prefix, as it sits in a payload."""
    body = encode_record(record)
    return _LEN.pack(len(body)) + body


def encode_payload(
    payload: bytes | bytearray | memoryview,
    record_count: int,
    first_timestamp: int,
    last_timestamp: int,
    compression: Compression = Compression.ZSTD,
    level: int = DEFAULT_ZSTD_LEVEL,
) -> EncodedSegment:
    """Seal an already framed payload into a segment: compress, header, CRC-32, footer, SHA-256."""
    compression = Compression.parse(compression)
    check_level(compression, level)
    header = SegmentHeader(compression, record_count, first_timestamp, last_timestamp)
    head = header.pack()
    compressed = payload if compression is Compression.NONE else compress(payload, compression, level)
    # One copy of the payload into the segment: the CRC runs over header and payload in place.
    footer = _FOOTER.pack(zlib.crc32(compressed, zlib.crc32(head)), END_MAGIC)
    data = b"".join((head, compressed, footer))
    return EncodedSegment(data, header, len(payload), hashlib.sha256(data).hexdigest())


def encode_segment(
    records: Iterable[BackupRecord], compression: Compression = Compression.ZSTD, level: int = DEFAULT_ZSTD_LEVEL
) -> EncodedSegment:
    """Encode records, in the order given, into one segment."""
    payload = bytearray()
    count = 0
    first = last = 0
    for record in records:
        payload += frame_record(record)
        if not count:
            first = record.backed_up_at
        last = record.backed_up_at
        count += 1
    return encode_payload(payload, count, first, last, compression, level)


def read_header(data: bytes | memoryview, name: str = "<segment>") -> SegmentHeader:
    """Check size, both magics, CRC-32, version and compression byte; return the header.

    This is everything short of decompressing: enough for a quick verify.
    """
    size = len(data)
    if size < HEADER_SIZE + FOOTER_SIZE:
        raise errors.SegmentTooShortError(
            f"{size} bytes is shorter than a header and footer ({HEADER_SIZE + FOOTER_SIZE})", segment=name, offset=size
        )
    magic, version, comp, _reserved, count, first, last = _HEADER.unpack_from(data, 0)
    if magic != MAGIC:
        raise errors.BadMagicError(f"start magic is {bytes(magic)!r}, expected b'RBAK'", segment=name, offset=0)
    crc, end_magic = _FOOTER.unpack_from(data, size - FOOTER_SIZE)
    if end_magic != END_MAGIC:
        raise errors.BadMagicError(
            f"end magic is {bytes(end_magic)!r}, expected b'KABR' (truncated or not a segment)", segment=name, offset=size - 4
        )
    actual = zlib.crc32(memoryview(data)[: size - FOOTER_SIZE])
    if actual != crc:
        raise errors.ChecksumMismatchError(
            f"CRC-32 mismatch: footer says {crc:08x}, bytes give {actual:08x}", segment=name, offset=size - FOOTER_SIZE
        )
    if version != FORMAT_VERSION:
        raise errors.UnsupportedVersionError(
            f"format version {version} is not supported (this reader knows 1)", segment=name, offset=4
        )
    try:
        compression = Compression(comp)
    except ValueError:
        raise errors.UnsupportedCompressionError(
            f"compression byte {comp} is unknown (0 none, 1 zstd, 2 lz4)", segment=name, offset=5
        ) from None
    return SegmentHeader(compression, count, first, last, version)


def iter_payload(payload: bytes, expected: int, name: str = "<segment>") -> Iterator[memoryview]:
    """Yield each record's JSON bytes, checking every length prefix against what remains."""
    view = memoryview(payload)
    _check_capacity(expected, len(payload), name)
    pos = index = 0
    while pos < len(payload):
        length = _framed_length(payload, pos, index, expected, name)
        pos += LENGTH_PREFIX_SIZE
        yield view[pos : pos + length]
        pos += length
        index += 1
    _check_count(index, expected, name)


def _check_capacity(expected: int, size: int, name: str) -> None:
    if expected > size // LENGTH_PREFIX_SIZE:
        raise errors.RecordCountMismatchError(
            f"header claims {expected} records, more than a {size}-byte payload can hold", segment=name, offset=8
        )


def _framed_length(payload: bytes, pos: int, index: int, expected: int, name: str) -> int:
    """The length prefix of record ``index`` at ``pos``, checked against what remains and the expected count."""
    size = len(payload)
    if size - pos < LENGTH_PREFIX_SIZE:
        raise errors.RecordFramingError(f"{size - pos} stray bytes after record {index}", segment=name, offset=pos)
    (length,) = _LEN.unpack_from(payload, pos)
    if length > size - pos - LENGTH_PREFIX_SIZE:
        raise errors.RecordFramingError(
            f"record {index} declares {length} bytes but {size - pos - LENGTH_PREFIX_SIZE} remain", segment=name, offset=pos
        )
    if index == expected:
        raise errors.RecordCountMismatchError(
            f"payload holds more than the {expected} records the header states", segment=name, offset=pos
        )
    return length


def _check_count(index: int, expected: int, name: str) -> None:
    if index != expected:
        raise errors.RecordCountMismatchError(f"header states {expected} records, payload holds {index}", segment=name, offset=8)


def decode_payload(
    data: bytes | memoryview, name: str = "<segment>", max_decompressed_bytes: int = DEFAULT_MAX_DECOMPRESSED_BYTES,
    expected_size: int | None = None,
) -> tuple[SegmentHeader, bytes]:
    """Check a segment and return its header and decompressed payload.

    ``expected_size`` is the manifest's ``uncompressed_bytes`` where a manifest
    vouches for the segment: the payload may be neither more nor less.
    """
    header = read_header(data, name)
    compressed = memoryview(data)[HEADER_SIZE : len(data) - FOOTER_SIZE]
    walk = _FramingWalk(header.record_count, min(max_decompressed_bytes, expected_size or max_decompressed_bytes), name)
    payload = decompress(compressed, header.compression, max_decompressed_bytes, name, expected_size=expected_size, visit=walk)
    return header, payload


class _FramingWalk:
    """Follows the length prefixes of a payload as it streams by, holding at most four bytes of it.

    It refuses a length that runs past what the payload may hold, and more
    records than the header states, before the payload is allocated whole;
    the record count and trailing bytes are checked when the stream ends.
    """

    def __init__(self, expected: int, limit: int, name: str) -> None:
        self.expected, self.limit, self.name = expected, limit, name
        self.next = 0  # offset of the next length prefix
        self.index = 0
        self.partial = b""

    def chunk(self, view: memoryview, offset: int) -> None:
        if self.partial:
            self.partial += bytes(view[: LENGTH_PREFIX_SIZE - len(self.partial)])
            if len(self.partial) < LENGTH_PREFIX_SIZE:
                return
            self._record(self.partial, 0)
            self.partial = b""
        size = len(view)
        while (rel := self.next - offset) < size:
            if rel + LENGTH_PREFIX_SIZE > size:
                self.partial = bytes(view[rel:])
                return
            self._record(view, rel)

    def _record(self, buffer: bytes | memoryview, at: int) -> None:
        (length,) = _LEN.unpack_from(buffer, at)
        if self.index == self.expected:
            raise errors.RecordCountMismatchError(
                f"payload holds more than the {self.expected} records the header states", segment=self.name, offset=self.next)
        end = self.next + LENGTH_PREFIX_SIZE + length
        if length < 2:  # a record is a JSON object; refusing empty ones also stops a bomb of zeros at once
            raise errors.RecordFramingError(f"record {self.index} declares {length} bytes", segment=self.name, offset=self.next)
        if end > self.limit:
            raise errors.RecordFramingError(
                f"record {self.index} declares {length} bytes, past the {self.limit} bytes the payload may hold",
                segment=self.name, offset=self.next)
        self.next, self.index = end, self.index + 1

    def end(self, size: int) -> None:
        if self.partial or self.next > size:
            raise errors.RecordFramingError(f"record {self.index - (not self.partial)} runs past the payload's end",
                                            segment=self.name, offset=size)
        if self.next < size:
            raise errors.RecordFramingError(
                f"{size - self.next} stray bytes after record {self.index}", segment=self.name, offset=self.next
            )
        _check_count(self.index, self.expected, self.name)


def iter_records(
    data: bytes | memoryview, name: str = "<segment>", max_decompressed_bytes: int = DEFAULT_MAX_DECOMPRESSED_BYTES
) -> Iterator[BackupRecord]:
    """Yield a segment's records in order; the count is checked when the iterator ends."""
    header, payload = decode_payload(data, name, max_decompressed_bytes)
    yield from iter_payload_records(payload, header.record_count, name)


def decode_segment(
    data: bytes | memoryview, *, name: str = "<segment>", max_decompressed_bytes: int = DEFAULT_MAX_DECOMPRESSED_BYTES
) -> DecodedSegment:
    """Read a whole segment, checking everything the spec's read algorithm checks."""
    header, payload = decode_payload(data, name, max_decompressed_bytes)
    return DecodedSegment(header, list(iter_payload_records(payload, header.record_count, name)), len(payload))


def iter_payload_records(payload: bytes, expected: int, name: str = "<segment>") -> Iterator[BackupRecord]:
    """Yield the records of a decompressed payload, each checked as it is parsed.

    The C accelerator, when built, decodes runs of up to ``_BATCH`` well-formed
    records per call; a record it leaves alone (an unusual shape or a defect) is
    read here, one at a time, where a defect gets its typed error.
    """
    _check_capacity(expected, len(payload), name)
    view = memoryview(payload)
    pos = index = 0
    while pos < len(payload):
        read = records.accelerated_read
        if read is not None:
            batch, after = read(payload, pos, min(expected - index, _BATCH))
            if batch:
                yield from batch
                pos, index = after, index + len(batch)
                continue
        length = _framed_length(payload, pos, index, expected, name)
        pos += LENGTH_PREFIX_SIZE
        try:
            yield decode_record(view[pos : pos + length])
        except RecordError as exc:
            raise errors.RecordDecodeError(f"record {index}: {exc}", segment=name, offset=pos) from None
        pos += length
        index += 1
    _check_count(index, expected, name)


def iter_records_from(
    data: bytes | memoryview, start: int = 0, name: str = "<segment>",
    max_decompressed_bytes: int = DEFAULT_MAX_DECOMPRESSED_BYTES,
) -> Iterator[tuple[int, BackupRecord]]:
    """Yield ``(index, record)`` from record ``start`` on, decompressing only as far as the caller reads.

    For a reader that wants a few records (a page of the backups view), not the whole segment: the header and
    CRC-32 are checked first, records before ``start`` are skipped by their length prefix without being decoded,
    and a caller that stops early never decompresses the rest (nor learns whether the rest is well formed, or holds
    the stated count: :func:`iter_records` checks all of it).
    """
    header = read_header(data, name)
    compressed = memoryview(data)[HEADER_SIZE : len(data) - FOOTER_SIZE]
    buffer, pos, index, seen = bytearray(), 0, 0, 0
    for chunk in _chunks(compressed, header.compression, name):
        seen += len(chunk)
        if seen > max_decompressed_bytes:
            raise errors.DecompressionBombError(f"payload exceeds {max_decompressed_bytes} bytes", segment=name)
        del buffer[:pos]
        buffer += chunk
        pos = 0
        while len(buffer) - pos >= LENGTH_PREFIX_SIZE and index < header.record_count:
            (length,) = _LEN.unpack_from(buffer, pos)
            end = pos + LENGTH_PREFIX_SIZE + length
            if end > len(buffer):
                break  # the record continues in the next chunk
            if index >= start:
                try:
                    record = decode_record(bytes(buffer[pos + LENGTH_PREFIX_SIZE : end]))  # a copy: buffer is resized
                except RecordError as exc:
                    raise errors.RecordDecodeError(f"record {index}: {exc}", segment=name, offset=pos) from None
                yield index, record
            pos, index = end, index + 1
    if index < header.record_count and index >= start:
        raise errors.RecordFramingError(f"the payload ends inside record {index}", segment=name)
