"""Deep check of one stored segment against its manifest entry: the unit of a distributed verify.

It performs the same per-segment checks as ``validate_backup(deep=True)``,
with the same messages (existence, size, SHA-256 against the manifest,
CRC-32 and framing, record count, uncompressed size, header against manifest
timestamps, header against its records' timestamps, records of another
queue), but returns them for one segment, so a Spark task can
check any subset and ship a small JSON result back to the driver.
``validate.py`` can call :func:`check_segment_bytes` for its deep pass.

Memory: bytes whose SHA-256 or record count disagree with the manifest are
never decompressed, and the payload may hold exactly the manifest's
``uncompressed_bytes`` (at most the cap), so hostile bytes cost one chunk.
The records are checked as the payload streams by (``codec.record_summary``):
a well-formed payload is decompressed once and never held whole.
"""

from __future__ import annotations

import hashlib
import time
from dataclasses import asdict, dataclass, field
from typing import Any

from airflow_rbak.codec import CodecError, SegmentMetadata
from airflow_rbak.codec.constants import DEFAULT_MAX_DECOMPRESSED_BYTES
from airflow_rbak.codec.record_summary import FrameLengths, summarize_payload
from airflow_rbak.codec.segment import read_header
from airflow_rbak.storage.base import ObjectNotFoundError, Storage, StorageError


@dataclass
class SegmentCheck:
    """What checking one segment found; ``ok`` is true only when ``defects`` is empty."""

    key: str
    vhost: str
    queue: str
    sequence: int
    bytes_checked: int = 0
    #: Whether the segment's bytes could be fetched at all (false: missing or unreadable).
    read: bool = False
    records_checked: int = 0
    seconds: float = 0.0
    defects: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.defects

    def to_json(self) -> dict[str, Any]:
        body = asdict(self)
        body["ok"] = self.ok
        return body

    @classmethod
    def from_json(cls, obj: dict[str, Any]) -> SegmentCheck:
        return cls(**{k: v for k, v in obj.items() if k != "ok"})


def check_segment(
    storage: Storage, vhost: str, queue: str, segment: SegmentMetadata, cap: int = DEFAULT_MAX_DECOMPRESSED_BYTES
) -> SegmentCheck:
    """Fetch one segment and check it completely; storage faults become defects, not exceptions."""
    started = time.perf_counter()
    result = SegmentCheck(segment.key, vhost, queue, segment.sequence)
    try:
        data = storage.get(segment.key)
    except ObjectNotFoundError:
        result.defects.append("missing")
    except StorageError as exc:
        result.defects.append(f"cannot be read: {exc}")
    else:
        check_segment_bytes(data, vhost, queue, segment, result, cap)
    result.seconds = round(time.perf_counter() - started, 6)
    return result


def check_segment_bytes(
    data: bytes, vhost: str, queue: str, segment: SegmentMetadata, result: SegmentCheck,
    cap: int = DEFAULT_MAX_DECOMPRESSED_BYTES, frames: FrameLengths | None = None,
) -> None:
    """Check a segment's bytes against its manifest entry, appending every defect to ``result``; ``frames``, if
    given, notes its longest record frame on the way (:class:`~airflow_rbak.codec.record_summary.FrameLengths`)."""
    result.read = True
    result.bytes_checked += len(data)
    if len(data) != segment.size_bytes:
        result.defects.append(f"size is {len(data)} bytes, manifest says {segment.size_bytes}")
    digest = hashlib.sha256(data).hexdigest()
    try:
        if digest != segment.checksum:
            # Bytes the manifest does not vouch for are not decompressed: a bomb costs nothing to refuse.
            result.defects.append(f"SHA-256 is {digest}, manifest says {segment.checksum}")
            read_header(data, segment.key)
        else:
            _check_contents(data, vhost, queue, segment, result, cap, frames)
    except CodecError as exc:
        result.defects.append(exc.reason + (f" at byte {exc.offset}" if exc.offset is not None else ""))


def _check_contents(data: bytes, vhost: str, queue: str, segment: SegmentMetadata, result: SegmentCheck, cap: int,
                    frames: FrameLengths | None = None) -> None:
    header = read_header(data, segment.key)
    if header.record_count != segment.record_count:
        result.defects.append(f"header holds {header.record_count} records, manifest says {segment.record_count}")
        return  # the payload is bounded by the manifest's counts: one that disagrees is not read
    summary = summarize_payload(data, header, segment.key, cap, segment.uncompressed_bytes, vhost, queue, frames)
    if (header.first_timestamp, header.last_timestamp) != (segment.first_timestamp or 0, segment.last_timestamp or 0):
        result.defects.append(
            f"header timestamps {header.first_timestamp}..{header.last_timestamp} disagree with the manifest's"
        )
    result.records_checked += summary.count
    if summary.foreign:
        result.defects.append(f"{summary.foreign} records name another queue than {vhost!r}/{queue!r}")
    if summary.count and (header.first_timestamp, header.last_timestamp) not in summary.readings:
        result.defects.append("header timestamps are neither its first and last records' nor their smallest and largest")
