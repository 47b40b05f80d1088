"""A streaming segment writer: records in, finished segments out when rotation says so.

Rotation follows spec 000: a segment is sealed once its uncompressed payload
reaches ``segment_max_bytes``, or before a record whose ``backed_up_at`` is
``segment_max_interval_ms`` or more after the segment's first record. Age is
measured on the records' own timestamps rather than the wall clock, so that
re-encoding the same records always cuts the same segments (idempotent
re-runs of the encode job depend on that).
"""

from __future__ import annotations

import struct

from airflow_rbak.codec import records
from airflow_rbak.codec.constants import (
    DEFAULT_SEGMENT_MAX_BYTES,
    DEFAULT_SEGMENT_MAX_INTERVAL_MS,
    DEFAULT_ZSTD_LEVEL,
    Compression,
)
from airflow_rbak.codec.records import BackupRecord, encode_record
from airflow_rbak.codec.segment import EncodedSegment, check_level, encode_payload
from airflow_rbak.exceptions import ConfigurationError

_LEN = struct.Struct("<I")


class SegmentWriter:
    """Accumulates framed records and seals a segment at each rotation point."""

    def __init__(
        self,
        compression: Compression | str = Compression.ZSTD,
        level: int = DEFAULT_ZSTD_LEVEL,
        segment_max_bytes: int = DEFAULT_SEGMENT_MAX_BYTES,
        segment_max_interval_ms: int = DEFAULT_SEGMENT_MAX_INTERVAL_MS,
    ) -> None:
        self.compression = Compression.parse(compression)
        self.level = check_level(self.compression, level)
        if not isinstance(segment_max_bytes, int) or segment_max_bytes < 1:
            raise ConfigurationError(f"segment_max_bytes must be a positive integer, got {segment_max_bytes!r}")
        if not isinstance(segment_max_interval_ms, int) or segment_max_interval_ms < 1:
            raise ConfigurationError(f"segment_max_interval_ms must be a positive integer, got {segment_max_interval_ms!r}")
        self.segment_max_bytes = segment_max_bytes
        self.segment_max_interval_ms = segment_max_interval_ms
        # One buffer for every segment: its first `_size` bytes are the pending payload. Keeping it
        # spares the allocator a fresh payload-sized block (and its page faults) per segment.
        self._buffer = bytearray()
        self._size = 0
        self._count = 0
        self._first = 0
        self._last = 0

    @property
    def pending_records(self) -> int:
        """Records added since the last sealed segment."""
        return self._count

    @property
    def pending_bytes(self) -> int:
        """Uncompressed payload bytes added since the last sealed segment."""
        return self._size

    def add(self, record: BackupRecord) -> tuple[EncodedSegment, ...]:
        """Add one record; return the segments this addition sealed (zero, one or two).

        A tuple, the empty one when nothing was sealed: no allocation per record.
        """
        backed_up_at = record.backed_up_at
        append = records.accelerated_append
        if append is not None and not (self._count and backed_up_at - self._first >= self.segment_max_interval_ms):
            # The C writer frames the record straight into the buffer; nothing counts until _added.
            size = append(self._buffer, self._size, record)
            if size >= 0:
                return self._added(size, backed_up_at)
        return self.add_encoded(encode_record(record), backed_up_at)

    def add_encoded(self, record_json: bytes | memoryview, backed_up_at: int) -> tuple[EncodedSegment, ...]:
        """Add a record already in its JSON form (re-encoding staged records skips a parse)."""
        sealed: tuple[EncodedSegment, ...] = ()
        if self._count and backed_up_at - self._first >= self.segment_max_interval_ms:
            sealed = (self._seal(),)
        start = self._size + _LEN.size
        end = start + len(record_json)
        self._buffer[self._size : start] = _LEN.pack(len(record_json))
        self._buffer[start:end] = record_json
        return sealed + self._added(end, backed_up_at)

    def flush(self) -> EncodedSegment | None:
        """Seal what is pending, if anything."""
        return self._seal() if self._count else None

    def _added(self, size: int, backed_up_at: int) -> tuple[EncodedSegment, ...]:
        if not self._count:
            self._first = backed_up_at
        self._last = backed_up_at
        self._count += 1
        self._size = size
        return (self._seal(),) if size >= self.segment_max_bytes else ()

    def _seal(self) -> EncodedSegment:
        with memoryview(self._buffer)[: self._size] as payload:
            segment = encode_payload(payload, self._count, self._first, self._last, self.compression, self.level)
        self._size = 0
        self._count = 0
        return segment
