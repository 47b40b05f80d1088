"""Compaction work: merge a queue's runs of small segments, re-sequence, and swap the manifest safely.

Plan (driver, from the manifest alone): walk a queue's segments in sequence
order; each run of consecutive segments smaller than ``threshold_bytes`` is
packed greedily into groups whose uncompressed payloads add up to at most
``segment_max_bytes`` and whose records span less than
``segment_max_interval_ms`` (the writer's own rotation limits). Each group
becomes one segment whose payload is the sources' payloads concatenated, so
records and their order are unchanged and every output's sequence number is
known before anything is written. Other segments are kept, copied when their
sequence number changes.

Crash safety: a new segment ``n`` cannot be written at ``segment-000n`` while
the manifest still lists the old ``segment-000n``. Outputs are therefore first
written at an *interim* key, the canonical name with one more leading zero
(``segment-00001.zst``: still sequence 1 for any key parser, never a name
the writer gives), read back and verified; then the manifest is saved
(atomic put) listing them; only then are the old segments deleted. A second
round copies interim segments to their canonical keys, verifies, saves the
manifest again and deletes the interim copies. At every instant the manifest
lists only verified, present segments. A re-run first deletes segment objects
no manifest entry references (what a crash left) and finishes a pending
second round.
"""

from __future__ import annotations

import hashlib
from dataclasses import asdict, dataclass
from typing import Any

from airflow_rbak.codec import BackupManifest, QueueBackup, SegmentMetadata
from airflow_rbak.codec.constants import (
    DEFAULT_SEGMENT_MAX_BYTES,
    DEFAULT_SEGMENT_MAX_INTERVAL_MS,
    DEFAULT_ZSTD_LEVEL,
    Compression,
)
from airflow_rbak.codec.layout import compression_from_key, interim_segment_key, parse_segment_key, queue_prefix, segment_key
from airflow_rbak.codec.segment import check_level, decode_payload, encode_payload
from airflow_rbak.codec.writer import check_segment_max_bytes
from airflow_rbak.exceptions import ConfigurationError, RbakError
from airflow_rbak.repository.segment_check import SegmentCheck, check_segment_bytes
from airflow_rbak.storage import open_storage
from airflow_rbak.storage.base import Storage


class CompactionError(RbakError):
    """A source or a freshly written segment failed its check; the manifest was not switched."""


@dataclass(frozen=True)
class CompactSpec:
    """Which segments count as small, and the limits merged segments respect."""

    threshold_bytes: int
    segment_max_bytes: int = DEFAULT_SEGMENT_MAX_BYTES
    segment_max_interval_ms: int = DEFAULT_SEGMENT_MAX_INTERVAL_MS
    compression: str = "zstd"
    level: int = DEFAULT_ZSTD_LEVEL

    def __post_init__(self) -> None:
        for name in ("threshold_bytes", "segment_max_bytes", "segment_max_interval_ms"):
            if not isinstance(getattr(self, name), int) or getattr(self, name) < 1:
                raise ConfigurationError(f"{name} must be a positive integer, got {getattr(self, name)!r}")
        check_segment_max_bytes(self.segment_max_bytes)
        check_level(self.codec, self.level)

    @property
    def codec(self) -> Compression:
        return Compression.parse(self.compression)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class OutputSegment:
    """One segment of a compacted queue and the old segments it is made of."""

    vhost: str
    queue: str
    sequence: int
    sources: tuple[dict[str, Any], ...]

    @property
    def kind(self) -> str:
        """``keep`` (same key, no I/O), ``copy`` (renumbered) or ``merge``."""
        if len(self.sources) > 1:
            return "merge"
        return "keep" if self.sources[0]["sequence"] == self.sequence else "copy"


def is_canonical(backup_id: str, vhost: str, queue: str, segment: SegmentMetadata) -> bool:
    return segment.key == segment_key(backup_id, vhost, queue, segment.sequence, compression_from_key(segment.key))


def plan_queue(queue: QueueBackup, settings: CompactSpec) -> list[OutputSegment] | None:
    """The queue's segments after compaction, or None when no two small segments can merge."""
    groups: list[list[SegmentMetadata]] = []
    for segment in sorted(queue.segments, key=lambda s: s.sequence):
        last = groups[-1] if groups else None
        if (
            last is not None
            and _small(segment, settings)
            and all(_small(s, settings) for s in last)
            and _fits(last, segment, settings)
        ):
            last.append(segment)
        else:
            groups.append([segment])
    if all(len(group) == 1 for group in groups):
        return None
    return [
        OutputSegment(queue.vhost, queue.name, index, tuple(s.to_json() for s in group))
        for index, group in enumerate(groups, start=1)
    ]


def _small(segment: SegmentMetadata, settings: CompactSpec) -> bool:
    return segment.size_bytes < settings.threshold_bytes


def _fits(group: list[SegmentMetadata], segment: SegmentMetadata, settings: CompactSpec) -> bool:
    payload = sum(s.uncompressed_bytes for s in group) + segment.uncompressed_bytes
    first = next((s.first_timestamp for s in group if s.record_count), None)
    span_ok = first is None or segment.last_timestamp is None or segment.last_timestamp - first < settings.segment_max_interval_ms
    return payload <= settings.segment_max_bytes and span_ok


def build_output(storage_url: str, backup_id: str, out: OutputSegment, settings: CompactSpec) -> dict[str, Any]:
    """Write one output segment at its interim key and verify it; return its manifest entry."""
    sources = [SegmentMetadata.from_json(s) for s in out.sources]
    if out.kind == "keep":
        return sources[0].to_json()
    storage = open_storage(storage_url)
    if out.kind == "copy":
        data = _checked_source(storage, out, sources[0])
        compression = compression_from_key(sources[0].key)
    else:
        data, compression = _merged(storage, out, sources, settings), settings.codec
    key = interim_segment_key(segment_key(backup_id, out.vhost, out.queue, out.sequence, compression))
    return store_verified(storage, out.vhost, out.queue, key, out.sequence, data).to_json()


def _checked_source(storage: Storage, out: OutputSegment, source: SegmentMetadata) -> bytes:
    data = storage.get(source.key)
    result = SegmentCheck(source.key, out.vhost, out.queue, source.sequence)
    check_segment_bytes(data, out.vhost, out.queue, source, result)
    if not result.ok:
        raise CompactionError(f"{source.key}: will not compact a damaged segment: {'; '.join(result.defects)}")
    return data


def _merged(storage: Storage, out: OutputSegment, sources: list[SegmentMetadata], settings: CompactSpec) -> bytes:
    payload = bytearray()
    for source in sources:
        _header, body = decode_payload(_checked_source(storage, out, source), source.key)
        payload += body
    stamped = [s for s in sources if s.record_count]
    first = stamped[0].first_timestamp if stamped else 0
    last = stamped[-1].last_timestamp if stamped else 0
    count = sum(s.record_count for s in sources)
    return encode_payload(payload, count, first or 0, last or 0, settings.codec, settings.level).data


def store_verified(storage: Storage, vhost: str, queue: str, key: str, sequence: int, data: bytes) -> SegmentMetadata:
    """Put a segment, read it back and check it fully; the entry to list it under."""
    header, payload = decode_payload(data, key)
    meta = SegmentMetadata(
        key=key, sequence=sequence, record_count=header.record_count, size_bytes=len(data),
        uncompressed_bytes=len(payload), first_timestamp=header.first_timestamp if header.record_count else None,
        last_timestamp=header.last_timestamp if header.record_count else None, checksum=hashlib.sha256(data).hexdigest(),
    )
    storage.put(key, data)
    result = SegmentCheck(key, vhost, queue, sequence)
    check_segment_bytes(storage.get(key), vhost, queue, meta, result)
    if not result.ok:
        raise CompactionError(f"{key}: written segment fails its check: {'; '.join(result.defects)}")
    return meta


def canonicalize(storage_url: str, backup_id: str, vhost: str, queue: str, segment: dict[str, Any]) -> dict[str, Any]:
    """Second round: copy an interim segment to its canonical key, verified; its new entry."""
    meta = SegmentMetadata.from_json(segment)
    if is_canonical(backup_id, vhost, queue, meta):
        return segment
    storage = open_storage(storage_url)
    data = storage.get(meta.key)
    if hashlib.sha256(data).hexdigest() != meta.checksum:
        raise CompactionError(f"{meta.key}: SHA-256 disagrees with the manifest; not copying it")
    key = segment_key(backup_id, vhost, queue, meta.sequence, compression_from_key(meta.key))
    return store_verified(storage, vhost, queue, key, meta.sequence, data).to_json()


def unreferenced_segments(storage: Storage, manifest: BackupManifest) -> list[str]:
    """Segment objects in the manifest's queue folders that no entry lists (left by a crash)."""
    listed = {s.key for q in manifest.queues for s in q.segments}
    found = []
    for queue in manifest.queues:
        for info in storage.list(queue_prefix(manifest.backup_id, queue.vhost, queue.name)):
            if info.key not in listed and parse_segment_key(info.key) is not None:
                found.append(info.key)
    return found
