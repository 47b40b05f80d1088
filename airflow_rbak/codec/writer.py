"""A streaming segment writer: records in, finished segments out when rotation says so.

Rotation follows the format: a segment is sealed once its uncompressed payload
reaches ``segment_max_bytes``, or before a record whose ``backed_up_at`` is
``segment_max_interval_ms`` or more after the segment's first record. The
writer never produces a segment our readers refuse at their default cap: the
setting has a maximum, a segment is sealed early before a record that would
take it past the cap, and a record that alone would is refused. Age is
measured on the records' own timestamps rather than the wall clock, so that
re-encoding the same records always cuts the same segments (idempotent
re-runs of the encode job depend on that).
"""

from __future__ import annotations

import struct
from collections import deque
from collections.abc import Generator, Iterable
from concurrent.futures import Executor, Future

from airflow_rbak.codec import records
from airflow_rbak.codec.constants import (
    DEFAULT_MAX_DECOMPRESSED_BYTES,
    DEFAULT_SEGMENT_MAX_BYTES,
    DEFAULT_SEGMENT_MAX_INTERVAL_MS,
    DEFAULT_ZSTD_LEVEL,
    MAX_SEGMENT_MAX_BYTES,
    Compression,
)
from airflow_rbak.codec.errors import RecordTooLargeError
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
        check_segment_max_bytes(segment_max_bytes)
        if not isinstance(segment_max_interval_ms, int) or segment_max_interval_ms < 1:
            raise ConfigurationError(f"segment_max_interval_ms must be a positive integer, got {segment_max_interval_ms!r}")
        self.segment_max_bytes = segment_max_bytes
        self.segment_max_interval_ms = segment_max_interval_ms
        #: The most a payload may hold: what readers accept by default.
        self.max_payload_bytes = DEFAULT_MAX_DECOMPRESSED_BYTES
        # One buffer for every segment: its first `_size` bytes are the pending payload. Keeping it
        # spares the allocator a fresh payload-sized block (and its page faults) per segment.
        self._buffer = bytearray()
        self._size = 0
        self._count = 0
        self._first = 0
        self._last = 0
        #: While :meth:`seal_all` runs with a pool: where full payloads are compressed, and their segments to come.
        self._pool: Executor | None = None
        self._in_flight: deque[Future[EncodedSegment]] = deque()

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
            if 0 <= size <= self.max_payload_bytes:
                return self._added(size, backed_up_at)
            if size > self.max_payload_bytes:  # too large to join this segment: framed again on the slow path
                del self._buffer[self._size :]
        return self.add_encoded(encode_record(record), backed_up_at)

    def add_encoded(self, record_json: bytes | memoryview, backed_up_at: int) -> tuple[EncodedSegment, ...]:
        """Add a record already in its JSON form (re-encoding staged records skips a parse)."""
        sealed: tuple[EncodedSegment, ...] = ()
        framed = _LEN.size + len(record_json)
        if framed > self.max_payload_bytes:
            raise RecordTooLargeError(
                f"a record of {len(record_json)} bytes (backed_up_at {backed_up_at}) would make a segment larger than "
                f"the {self.max_payload_bytes} bytes readers accept by default", segment="<writer>")
        if self._count and (backed_up_at - self._first >= self.segment_max_interval_ms
                            or self._size + framed > self.max_payload_bytes):
            sealed = self._seal()
        start = self._size + _LEN.size
        end = start + len(record_json)
        self._buffer[self._size : start] = _LEN.pack(len(record_json))
        self._buffer[start:end] = record_json
        return sealed + self._added(end, backed_up_at)

    def flush(self) -> EncodedSegment | None:
        """Seal what is pending, if anything."""
        sealed = self._seal() if self._count else ()
        return sealed[0] if sealed else None

    def seal_all(self, records: Iterable[tuple[bytes | memoryview, int]], pool: Executor | None = None,
                 ahead: int = 1) -> Generator[EncodedSegment, None, None]:
        """Every segment ``records`` (record JSON, ``backed_up_at``) make, in order, the last one flushed.

        With ``pool``, each full payload is compressed there while the next one fills, up to ``ahead`` at a time
        (each holding a payload buffer of its own): the same segments, sooner where a core is free.
        """
        if pool is None:
            for record_json, backed_up_at in records:
                yield from self.add_encoded(record_json, backed_up_at)
            if (last := self.flush()) is not None:
                yield last
            return
        self._pool = pool
        try:
            for record_json, backed_up_at in records:
                self.add_encoded(record_json, backed_up_at)
                while len(self._in_flight) > ahead:
                    yield self._in_flight.popleft().result()
            self.flush()
            while self._in_flight:
                yield self._in_flight.popleft().result()
        finally:
            self._pool = None
            while self._in_flight:
                self._in_flight.popleft().cancel()

    def _added(self, size: int, backed_up_at: int) -> tuple[EncodedSegment, ...]:
        if not self._count:
            self._first = backed_up_at
        self._last = backed_up_at
        self._count += 1
        self._size = size
        return self._seal() if size >= self.segment_max_bytes else ()

    def _seal(self) -> tuple[EncodedSegment, ...]:
        """The pending payload as a segment; under :meth:`seal_all` with a pool, handed to it with its buffer instead
        (the segment comes out of ``seal_all``, and nothing is returned here)."""
        args = (self._count, self._first, self._last, self.compression, self.level)
        self._size, size, self._count = 0, self._size, 0
        if self._pool is not None:
            payload, self._buffer = self._buffer, bytearray()
            self._in_flight.append(self._pool.submit(_seal_payload, payload, size, *args))
            return ()
        return (_seal_payload(self._buffer, size, *args),)


def _seal_payload(buffer: bytearray, size: int, count: int, first: int, last: int, compression: Compression,
                  level: int) -> EncodedSegment:
    with memoryview(buffer)[:size] as payload:  # released once sealed, so that the buffer may grow again
        return encode_payload(payload, count, first, last, compression, level)


def check_segment_max_bytes(value: int) -> int:
    """Refuse a ``segment_max_bytes`` that is not a positive integer up to :data:`MAX_SEGMENT_MAX_BYTES`."""
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_SEGMENT_MAX_BYTES:
        raise ConfigurationError(
            f"segment_max_bytes must be an integer from 1 to {MAX_SEGMENT_MAX_BYTES} (128 MiB: a segment then holds "
            f"at most {DEFAULT_MAX_DECOMPRESSED_BYTES} bytes, what readers accept by default), got {value!r}")
    return value
