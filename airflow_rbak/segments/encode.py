"""Encode staging into final segments in ranges that run in parallel yet number contiguously.

A queue's staged chunks (capture order) are cut into *ranges* of whole
chunks, about ``range_bytes`` of staging each, decided from the chunk
listing alone. Each range is encoded by a fresh :class:`SegmentWriter`, so a
range boundary is a forced segment cut and a range's segments depend only on
its own records. That makes two passes enough:

1. count: for every range but a queue's last, run the writer's rotation over
   the range's records without compressing (``Compression.NONE`` cuts at the
   same places) and return the number of segments it will seal;
2. write: a prefix sum over those counts gives each range its first sequence
   number; each range then writes ``segment-{first+i}`` for its segments.

A queue of one range (most queues) skips pass 1; in one process,
:func:`encode_queue_here` writes the ranges one after another, to the same keys and bytes. The result
depends on the staging and the settings only, never on the cluster, so a
re-run writes the same keys and bytes; a segment already stored with the
same bytes is left untouched, and segments a previous run with other
settings left past the new end are removed once every write succeeded.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from contextlib import nullcontext
from dataclasses import asdict, dataclass, field
from typing import Any

from airflow_rbak import __version__
from airflow_rbak.capture.checkpoints import accounted_chunk_keys, read_progress
from airflow_rbak.codec import BackupManifest, EncodedSegment, QueueBackup, SegmentMetadata, SegmentWriter
from airflow_rbak.codec.constants import (
    DEFAULT_SEGMENT_MAX_BYTES,
    DEFAULT_SEGMENT_MAX_INTERVAL_MS,
    DEFAULT_ZSTD_LEVEL,
    Compression,
)
from airflow_rbak.codec.layout import (
    check_backup_id,
    checkpoint_dir_key,
    decode_name,
    encode_name,
    is_shortened,
    parse_segment_key,
    queue_prefix,
    segment_key,
    staging_prefix,
    vhost_dir,
    vhost_from_dir,
)
from airflow_rbak.codec.manifest import QUEUE_TYPES
from airflow_rbak.exceptions import ConfigurationError, RbakError
from airflow_rbak.repository.staging import iter_staged_json
from airflow_rbak.storage import open_storage
from airflow_rbak.storage.base import ObjectInfo, ObjectNotFoundError, Storage

DEFAULT_RANGE_BYTES = 256 * 1024**2
#: Told of each segment once it is stored: (vhost, queue, its metadata as JSON).
OnStored = Callable[[str, str, dict[str, Any]], None]


class EncodeError(RbakError):
    """The encode's results do not add up (a bug or a concurrent writer), so nothing is reported as done."""


@dataclass(frozen=True)
class EncodeSpec:
    """How segments are cut and compressed; part of what makes a re-run identical."""

    compression: str = "zstd"
    level: int = DEFAULT_ZSTD_LEVEL
    segment_max_bytes: int = DEFAULT_SEGMENT_MAX_BYTES
    segment_max_interval_ms: int = DEFAULT_SEGMENT_MAX_INTERVAL_MS
    range_bytes: int = DEFAULT_RANGE_BYTES

    def __post_init__(self) -> None:
        self.writer()  # the codec validates compression, level and rotation limits
        if not isinstance(self.range_bytes, int) or self.range_bytes < 1:
            raise ConfigurationError(f"range_bytes must be a positive integer, got {self.range_bytes!r}")

    @property
    def codec(self) -> Compression:
        return Compression.parse(self.compression)

    def writer(self, compression: Compression | None = None) -> SegmentWriter:
        return SegmentWriter(compression or self.codec, self.level, self.segment_max_bytes, self.segment_max_interval_ms)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class QueueRef:
    """A queue to encode: identity from the staging folders, type from ``--queues-json``."""

    vhost: str
    name: str
    queue_type: str = "classic"

    def __post_init__(self) -> None:
        if self.queue_type not in QUEUE_TYPES:
            raise ConfigurationError(f"queue {self.vhost!r}/{self.name!r}: queue_type must be one of {QUEUE_TYPES}")


@dataclass(frozen=True)
class StagingRange:
    """Consecutive whole chunks of one queue's staging, encoded by one task."""

    vhost: str
    queue: str
    index: int
    chunk_keys: tuple[str, ...]
    staged_bytes: int


@dataclass
class RangeResult:
    """The segments one range sealed, and how many it had to store."""

    vhost: str
    queue: str
    index: int
    segments: list[dict[str, Any]] = field(default_factory=list)
    written: int = 0
    unchanged: int = 0


def discover_staging(storage: Storage, backup_id: str) -> dict[tuple[str, str], list[ObjectInfo]]:
    """Every staged chunk under ``{backup_id}/staging/`` that a capture checkpoint accounts for, grouped by
    (vhost, queue), in capture order."""
    prefix = f"{check_backup_id(backup_id)}/staging/"
    found: dict[tuple[str, str], list[ObjectInfo]] = {}
    folders: dict[tuple[str, str], list[ObjectInfo]] = {}
    for info in storage.list(prefix):
        parts = info.key[len(prefix) :].split("/")
        if len(parts) == 3 and parts[2].startswith("chunk-"):
            folders.setdefault((parts[0], parts[1]), []).append(info)
    for (vhost_part, queue_part), chunks in folders.items():
        # Only what the queue's capture checkpoint accounts for: a killed attempt's extra chunks are never encoded.
        accounted = set(accounted_chunk_keys(storage, backup_id, vhost_part, queue_part, [c.key for c in chunks]))
        chunks = sorted((c for c in chunks if c.key in accounted), key=lambda c: c.key)
        if chunks:
            found[_staged_names(storage, backup_id, vhost_part, queue_part)] = chunks
    return found


def queue_staging(storage: Storage, backup_id: str, vhost: str, queue: str) -> list[ObjectInfo]:
    """One queue's staged chunks that its capture checkpoint accounts for, in capture order."""
    chunks = [i for i in storage.list(staging_prefix(backup_id, vhost, queue)) if i.key.rsplit("/", 1)[-1].startswith("chunk-")]
    accounted = set(accounted_chunk_keys(storage, backup_id, vhost_dir(vhost), encode_name(queue), [c.key for c in chunks]))
    return sorted((c for c in chunks if c.key in accounted), key=lambda c: c.key)


def encode_queue_here(
    storage: Storage, backup_id: str, ref: QueueRef, settings: EncodeSpec, on_stored: OnStored | None = None
) -> tuple[QueueBackup, list[RangeResult], list[str]]:
    """Encode one queue in this process, range after range, into exactly the keys and bytes the Spark passes
    write (each range starts where the one before it ended, so no counting pass is needed); returns its
    manifest entry, its ranges' results and the stale segments it removed. Each full segment compresses while
    the next one fills (:mod:`.overlap`), and ``on_stored`` hears of each segment once it is stored."""
    ranges = plan_ranges(ref.vhost, ref.name, queue_staging(storage, backup_id, ref.vhost, ref.name), settings.range_bytes)
    results: list[RangeResult] = []
    following = 1
    for rng in ranges:
        results.append(write_range(storage, backup_id, rng, following, settings, on_stored=on_stored, overlap=True))
        following += len(results[-1].segments)
    entry = assemble_queue(ref, results)
    return entry, results, remove_stale_segments(storage, backup_id, entry)


def _staged_names(storage: Storage, backup_id: str, vhost_part: str, queue_part: str) -> tuple[str, str]:
    """A staging folder's vhost and queue: decoded, or, for a shortened long name, read from its capture checkpoint
    (which accounts for the chunks, so it is there)."""
    if not (is_shortened(vhost_part) or is_shortened(queue_part)):
        return vhost_from_dir(vhost_part), decode_name(queue_part)
    progress = read_progress(storage, checkpoint_dir_key(backup_id, vhost_part, queue_part))
    if progress is None:
        raise EncodeError(f"staging/{vhost_part}/{queue_part}: no capture checkpoint, so its queue's long name is unknown")
    return progress.vhost, progress.queue


def parse_queue_refs(queues: Iterable[dict[str, Any]]) -> list[QueueRef]:
    """Read ``[{"vhost": "/", "name": "orders", "queue_type": "quorum"}, ...]`` (``--queues-json``)."""
    refs = []
    for entry in queues:
        if not isinstance(entry, dict) or not isinstance(entry.get("vhost"), str) or not isinstance(entry.get("name"), str):
            raise ConfigurationError(f"each queue needs string 'vhost' and 'name', got {entry!r:.80}")
        refs.append(QueueRef(entry["vhost"], entry["name"], entry.get("queue_type", "classic")))
    return refs


def queues_to_encode(staged: dict[tuple[str, str], list[ObjectInfo]], declared: list[QueueRef]) -> list[QueueRef]:
    """Staged queues (classic unless declared) plus declared queues with nothing staged, sorted."""
    by_id = {(q.vhost, q.name): q for q in declared}
    for vhost, name in staged:
        by_id.setdefault((vhost, name), QueueRef(vhost, name))
    return sorted(by_id.values(), key=lambda q: (q.vhost, q.name))


def plan_ranges(vhost: str, queue: str, chunks: list[ObjectInfo], range_bytes: int) -> list[StagingRange]:
    """Cut a queue's chunks into ranges of about ``range_bytes`` (at least one chunk each)."""
    ranges: list[StagingRange] = []
    keys: list[str] = []
    size = 0
    for chunk in chunks:
        if keys and size + chunk.size > range_bytes:
            ranges.append(StagingRange(vhost, queue, len(ranges), tuple(keys), size))
            keys, size = [], 0
        keys.append(chunk.key)
        size += chunk.size
    if keys:
        ranges.append(StagingRange(vhost, queue, len(ranges), tuple(keys), size))
    return ranges


def count_range_segments(storage_url: str, rng: StagingRange, settings: EncodeSpec) -> int:
    """Pass 1: how many segments this range seals (rotation only; nothing is compressed or stored)."""
    storage = open_storage(storage_url)
    writer = settings.writer(Compression.NONE)
    return sum(1 for _ in writer.seal_all(iter_staged_json(storage, list(rng.chunk_keys), rng.vhost, rng.queue)))


def first_sequences(ranges: list[StagingRange], counts: dict[tuple[str, str, int], int]) -> dict[tuple[str, str, int], int]:
    """Prefix sums: each range's first sequence number; ``counts`` lacks each queue's last range."""
    firsts: dict[tuple[str, str, int], int] = {}
    following: dict[tuple[str, str], int] = {}
    for rng in sorted(ranges, key=lambda r: (r.vhost, r.queue, r.index)):
        ident = (rng.vhost, rng.queue, rng.index)
        firsts[ident] = following.get((rng.vhost, rng.queue), 1)
        if ident in counts:
            following[(rng.vhost, rng.queue)] = firsts[ident] + counts[ident]
    return firsts


def encode_range(
    storage_url: str, backup_id: str, rng: StagingRange, first_sequence: int, settings: EncodeSpec
) -> RangeResult:
    """Pass 2, as a Spark task: :func:`write_range` on storage opened from its URL."""
    return write_range(open_storage(storage_url), backup_id, rng, first_sequence, settings)


def write_range(
    storage: Storage, backup_id: str, rng: StagingRange, first_sequence: int, settings: EncodeSpec, *,
    on_stored: OnStored | None = None, overlap: bool = False,
) -> RangeResult:
    """Seal a range's records into segments numbered from ``first_sequence`` and store them. ``overlap``
    compresses each full segment on a thread while the next one fills (:mod:`.overlap`); a Spark task keeps to
    its one core and does not."""
    writer = settings.writer()
    result = RangeResult(rng.vhost, rng.queue, rng.index)
    records = iter_staged_json(storage, list(rng.chunk_keys), rng.vhost, rng.queue)
    with ThreadPoolExecutor(1, thread_name_prefix="rbak-seal") if overlap else nullcontext() as pool:
        sealed = writer.seal_all(records, pool)
        try:
            for segment in sealed:
                sequence = first_sequence + len(result.segments)
                key = segment_key(backup_id, rng.vhost, rng.queue, sequence, writer.compression)
                if put_if_changed(storage, key, segment):
                    result.written += 1
                else:
                    result.unchanged += 1
                result.segments.append(segment.metadata(key, sequence).to_json())
                if on_stored is not None:
                    on_stored(rng.vhost, rng.queue, result.segments[-1])
        finally:
            sealed.close()  # an early end cancels the segments still to be compressed
            records.close()
    return result


def put_if_changed(storage: Storage, key: str, segment: EncodedSegment) -> bool:
    """Store a segment unless the same bytes are already there; True when it wrote."""
    try:
        if storage.stat(key).size == len(segment.data) and hashlib.sha256(storage.get(key)).hexdigest() == segment.sha256:
            return False
    except ObjectNotFoundError:
        pass
    storage.put(key, segment.data)
    return True


def assemble_queue(ref: QueueRef, results: Iterable[RangeResult]) -> QueueBackup:
    """A queue's manifest entry from its ranges' results, checking sequences run 1..n."""
    ordered = sorted((r for r in results if (r.vhost, r.queue) == (ref.vhost, ref.name)), key=lambda r: r.index)
    segments = [SegmentMetadata.from_json(s) for r in ordered for s in r.segments]
    sequences = [s.sequence for s in segments]
    if sequences != list(range(1, len(segments) + 1)):
        raise EncodeError(f"queue {ref.vhost!r}/{ref.name!r}: encoded sequences {sequences[:10]} are not 1..n")
    queue = QueueBackup(vhost=ref.vhost, name=ref.name, queue_type=ref.queue_type, segments=segments)
    queue.refresh_totals()
    return queue


def remove_stale_segments(storage: Storage, backup_id: str, queue: QueueBackup) -> list[str]:
    """Delete the queue's segment objects this encode did not produce (left by a run with other settings)."""
    keep = {s.key for s in queue.segments}
    stale = [
        info.key
        for info in storage.list(queue_prefix(backup_id, queue.vhost, queue.name))
        if info.key not in keep and parse_segment_key(info.key) is not None
    ]
    for key in stale:
        storage.delete(key)
    return stale


def manifest_from_encode_report(
    report: dict[str, Any],
    *,
    created_at: int | None = None,
    completed_at: int | None = None,
    source_cluster: str | None = None,
    rabbitmq_version: str | None = None,
) -> BackupManifest:
    """Build the backup's manifest from an encode report (what the finalize step calls).

    ``created_at`` defaults to the encode job's start. The manifest has no
    definitions; finalize adds them, sets ``completed_at`` and saves it last.
    """
    queues = [QueueBackup.from_json(q, f"report.queues[{i}]") for i, q in enumerate(report["details"]["queues"])]
    manifest = BackupManifest(
        backup_id=report["backup_id"],
        created_at=created_at if created_at is not None else report["started_at"],
        backup_tool_version=__version__,
        completed_at=completed_at,
        source_cluster=source_cluster,
        rabbitmq_version=rabbitmq_version,
        queues=queues,
    )
    manifest.refresh_totals()
    return manifest
