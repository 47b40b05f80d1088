"""Validation of a stored backup: every defect collected, not just the first.

Quick validation checks the manifest and that each segment exists with its
recorded size, including the segments a stream chain takes from earlier
backups (a missing base backup is named as such). Deep validation also reads every segment: CRC-32, SHA-256
against the manifest, record counts, header and manifest timestamps, and the
definitions export. Records may be in any order of ``backed_up_at``.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from airflow_rbak.codec import BackupManifest, CodecError, QueueBackup, SegmentMetadata
from airflow_rbak.codec.bounded_json import DEFINITIONS_LIMITS, loads_bounded
from airflow_rbak.codec.constants import DEFAULT_MAX_DECOMPRESSED_BYTES
from airflow_rbak.codec.layout import manifest_key
from airflow_rbak.codec.manifest import count_definitions
from airflow_rbak.repository import chain
from airflow_rbak.repository.manifest_store import ManifestNotFoundError, ManifestStore
from airflow_rbak.repository.ownership import definitions_defect, is_interim_copy, queue_defects
from airflow_rbak.repository.segment_check import check_segment
from airflow_rbak.storage.base import ObjectNotFoundError, Storage, StorageError
from airflow_rbak.storage.json_objects import read_json_text


@dataclass(frozen=True)
class Defect:
    """One thing wrong with a backup: the object it concerns and a one-line reason."""

    key: str
    reason: str

    def __str__(self) -> str:
        return f"{self.key}: {self.reason}"


@dataclass
class ValidationReport:
    """What validation found; ``valid`` is true only when ``defects`` is empty."""

    backup_id: str
    deep: bool
    segments_checked: int = 0
    records_checked: int = 0
    bytes_checked: int = 0
    defects: list[Defect] = field(default_factory=list)

    @property
    def valid(self) -> bool:
        return not self.defects

    def add(self, key: str, reason: str) -> None:
        self.defects.append(Defect(key, reason))

    def to_json(self) -> dict[str, Any]:
        body = asdict(self)
        body["valid"] = self.valid
        return body


def validate_backup(
    storage: Storage, backup_id: str, *, deep: bool = False, max_decompressed_bytes: int = DEFAULT_MAX_DECOMPRESSED_BYTES
) -> ValidationReport:
    """Validate one backup and return every defect found."""
    report = ValidationReport(backup_id, deep)
    try:
        manifest = ManifestStore(storage).load(backup_id)
    except (ManifestNotFoundError, CodecError) as exc:
        report.add(manifest_key(backup_id), str(exc).split(": ", 1)[-1] if isinstance(exc, CodecError) else "missing")
        return report
    _check_manifest(manifest, report)
    for queue in manifest.queues:
        foreign = queue_defects(manifest, queue)
        _check_queue_listing(manifest, queue, report, foreign)
        for segment in queue.segments:
            if segment.key in foreign:
                continue  # not this backup's object: named by the listing check, never read
            if deep:
                _check_segment_deep(storage, queue, segment, report, max_decompressed_bytes)
            else:
                _check_segment_quick(storage, segment, report)
    if manifest.definitions is not None:
        _check_definitions(storage, manifest, report, deep, max_decompressed_bytes)
    _check_leftovers(storage, manifest, report)
    _check_chain(manifest, report)
    return report


def _check_leftovers(storage: Storage, manifest: BackupManifest, report: ValidationReport) -> None:
    """Interim compaction copies the manifest does not name: a rebuild would read them as segments of their own."""
    named = {s.key for q in manifest.queues for s in q.segments}
    try:
        listed = [i.key for i in storage.list(f"{report.backup_id}/queues/")]
    except StorageError as exc:
        report.add(f"{report.backup_id}/queues/", f"cannot be listed: {exc}")
        return
    for key in listed:
        if is_interim_copy(key) and key not in named:
            report.add(key, "leftover interim compaction copy, not part of the backup (an interrupted compaction); "
                            "delete it, or `rbak manifest rebuild` leaves it out")


def _check_chain(manifest: BackupManifest, report: ValidationReport) -> None:
    """Name each base backup whose segments are gone, and keys in folders the manifest does not declare."""
    key = manifest_key(report.backup_id)
    try:
        chain.dependencies(manifest)
    except CodecError as exc:
        report.add(key, exc.reason)
        return
    # keys in undeclared folders are named per segment (repository.ownership)
    missing = {d.key for d in report.defects if d.reason == "missing"}
    for base, (gone, listed) in chain.missing_bases(manifest, missing).items():
        report.add(key, chain.missing_base_reason(base, gone, listed))


def _check_manifest(manifest: BackupManifest, report: ValidationReport) -> None:
    key = manifest_key(report.backup_id)
    if manifest.backup_id != report.backup_id:
        report.add(key, f"backup_id is {manifest.backup_id!r}, expected {report.backup_id!r}")
        manifest.backup_id = report.backup_id  # judge its keys by the folder asked for: the manifest's id may be hostile
    if manifest.completed_at is None:
        report.add(key, "backup did not complete (completed_at is null)")
    expected = {
        "total_messages": sum(q.message_count for q in manifest.queues),
        "total_segments": sum(len(q.segments) for q in manifest.queues),
        "total_bytes": sum(s.size_bytes for q in manifest.queues for s in q.segments),
    }
    for name, value in expected.items():
        if getattr(manifest, name) != value:
            report.add(key, f"{name} is {getattr(manifest, name)}, the queues add up to {value}")


def _check_queue_listing(manifest: BackupManifest, queue: QueueBackup, report: ValidationReport,
                         foreign: dict[str, str]) -> None:
    where = f"{manifest_key(manifest.backup_id)} queue {queue.vhost!r}/{queue.name!r}"
    sequences = [s.sequence for s in queue.segments]
    if sequences != list(range(1, len(sequences) + 1)):
        report.add(where, f"segment sequences are {sequences[:10]}, expected 1..{len(sequences)} without gaps")
    if queue.message_count != sum(s.record_count for s in queue.segments):
        report.add(
            where, f"message_count is {queue.message_count}, its segments hold {sum(s.record_count for s in queue.segments)}"
        )
    stamped = [s for s in queue.segments if s.record_count]
    readings = {(None, None)} if not stamped else {
        (stamped[0].first_timestamp, stamped[-1].last_timestamp),
        (_extreme(min, stamped), _extreme(max, stamped))}
    if (queue.first_message_timestamp, queue.last_message_timestamp) not in readings:
        report.add(where, "first/last message timestamps disagree with its segments")
    for key, reason in foreign.items():
        report.add(key, reason)


def _extreme(pick: Any, segments: list[SegmentMetadata]) -> int | None:
    """The smallest (``min``) or largest (``max``) timestamp the segments state: a queue of records out of time order
    may give its first and last message timestamps so."""
    stamps = [t for s in segments for t in (s.first_timestamp, s.last_timestamp) if t is not None]
    return pick(stamps) if stamps else None


def _check_segment_quick(storage: Storage, segment: SegmentMetadata, report: ValidationReport) -> None:
    try:
        info = storage.stat(segment.key)
    except ObjectNotFoundError:
        report.add(segment.key, "missing")
        return
    except StorageError as exc:
        report.add(segment.key, f"cannot be read: {exc}")
        return
    report.segments_checked += 1
    report.bytes_checked += info.size
    if info.size != segment.size_bytes:
        report.add(segment.key, f"size is {info.size} bytes, manifest says {segment.size_bytes}")


def _check_segment_deep(
    storage: Storage, queue: QueueBackup, segment: SegmentMetadata, report: ValidationReport, cap: int
) -> None:
    check = check_segment(storage, queue.vhost, queue.name, segment, cap)
    if check.read:
        report.segments_checked += 1
    report.bytes_checked += check.bytes_checked
    report.records_checked += check.records_checked
    for reason in check.defects:
        report.add(segment.key, reason)


def _check_definitions(storage: Storage, manifest: BackupManifest, report: ValidationReport, deep: bool, cap: int) -> None:
    definitions = manifest.definitions
    if definitions is None:
        return
    if (reason := definitions_defect(manifest)) is not None:
        report.add(definitions.key, reason)
        return
    try:
        if not deep:
            storage.stat(definitions.key)
            return
        text = read_json_text(storage, definitions.key, DEFINITIONS_LIMITS)
    except ObjectNotFoundError:
        report.add(definitions.key, "definitions export is missing")
        return
    except (StorageError, CodecError) as exc:  # an invalid key in a damaged manifest, a storage fault, over a cap
        report.add(definitions.key, f"definitions export cannot be read: {exc}")
        return
    try:
        parsed = loads_bounded(text, definitions.key, DEFINITIONS_LIMITS)
    except CodecError as exc:
        report.add(definitions.key, f"definitions export cannot be read: {exc}")
        return
    if len(text) != definitions.size_bytes:
        report.add(definitions.key, f"definitions are {len(text)} bytes, manifest says {definitions.size_bytes}")
    for name, found in count_definitions(parsed).items():
        if found != getattr(definitions, name):
            report.add(definitions.key, f"{name} is {getattr(definitions, name)}, the export holds {found}")

