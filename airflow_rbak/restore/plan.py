"""The restore plan: which segments of which queues go where, verified, with counts inside the window.

Planning reads the manifest (a stream's entry lists the segments of the
backups its chain continues, so the plan reads them like its own and
reports which backups it drew from), picks the selected queues, then
fetches and fully verifies every segment of them (SHA-256 against the
manifest, CRC-32, framing, record count: the checks of
``repository.segment_check``) and counts the records inside the window; a
segment holding none is left out of the plan. The format does not require a
segment's records in time order, so its timestamps cannot tell that no record
lies in the window: only its records can. Damaged segments stop the restore, naming them,
unless ``skip_damaged_segments`` is set; then the plan lists exactly what
it skipped. The plan is plain JSON, so it travels between tasks as XCom.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import closing
from dataclasses import dataclass
from itertools import islice

from airflow_rbak.codec import BackupManifest, QueueBackup, iter_records
from airflow_rbak.codec.errors import ManifestError
from airflow_rbak.display import package_logger
from airflow_rbak.repository.catalog import NoCompleteBackupError, resolve_backup_id
from airflow_rbak.repository.chain import segment_owner
from airflow_rbak.repository.manifest_store import ManifestNotFoundError, ManifestStore
from airflow_rbak.repository.ownership import foreign_objects
from airflow_rbak.restore import exchange_routes, journal_recovery, selection
from airflow_rbak.restore.errors import BackupNotRestorableError, DamagedSegmentsError
from airflow_rbak.restore.message_sizes import LargeMessage, large_messages
from airflow_rbak.restore.queue_scan import QueueScan, check_total, chosen_queues
from airflow_rbak.restore.request import RestoreRequest
from airflow_rbak.restore.restore_plan import QueuePlan, QueueRefusal, RestorePlan, SegmentPlan, SkippedSegment
from airflow_rbak.restore.restore_plan import queue_checkpoint as queue_checkpoint  # still importable from here
from airflow_rbak.restore.segment_checks import CheckedSegment, checked_segments
from airflow_rbak.storage.base import Storage

log = package_logger(__name__)


@dataclass(frozen=True)
class QueueOutcome:
    """One queue as planning found it: its plan, or its refusal; and what verifying its segments found."""

    plan: QueuePlan | None
    refusal: QueueRefusal | None
    skipped: tuple[SkippedSegment, ...]
    defects: dict[str, list[str]]
    verified: int
    outside: int


def resolve_manifest(storage: Storage, backup_id: str) -> BackupManifest:
    """Load the named backup's manifest (``latest``: the newest complete one); refuse incomplete backups."""
    try:
        backup_id = resolve_backup_id(storage, backup_id)
    except NoCompleteBackupError:
        raise BackupNotRestorableError(f"{storage.url} holds no complete backup; give backup_id explicitly") from None
    try:  # the store refuses a manifest naming another backup: its keys and checkpoints must stay under backup_id/
        manifest = ManifestStore(storage).load(backup_id)
    except (ManifestNotFoundError, ManifestError) as exc:
        raise BackupNotRestorableError(str(exc)) from None
    if manifest.completed_at is None:
        raise BackupNotRestorableError(
            f"backup {backup_id!r} did not complete (completed_at is null); re-run that backup or choose another"
        )
    return manifest


def plan_restore(storage: Storage, request: RestoreRequest) -> RestorePlan:
    """Read the manifest, verify the segments the window needs, count what will be published."""
    recovery = request.journal_until is not None
    manifest = (journal_recovery.snapshot_manifest(storage, request, resolve_manifest) if recovery
                else resolve_manifest(storage, request.backup_id))
    foreign = foreign_objects(manifest)
    if foreign:
        raise BackupNotRestorableError(
            f"the manifest of backup {manifest.backup_id!r} names objects that are not its own "
            f"({'; '.join(f'{k}: {r}' for k, r in foreign[:5])}); nothing was read from them. "
            "Run `rbak validate --deep`, then restore from another backup or `rbak manifest rebuild --replace`")
    selected, chosen = chosen_queues(request, [q for q in manifest.queues if request.selects(q.vhost, q.name)])
    _check_targets_unique(selected, request)
    # every selected segment is read in order and checked a few at a time (segment_checks.py), each queue taking its own
    ordered = ((entry, meta) for entry in selected for meta in entry.stored_order())
    with closing(checked_segments(storage, ordered, request.max_decompressed_bytes)) as checked:
        outcomes = [_plan_queue(checked, entry, request, chosen.get((entry.vhost, entry.name))) for entry in selected]
    # a selective restore touches only the queues it selects
    queues = [o.plan for o in outcomes if o.plan is not None and (o.plan.records_in_window or not request.selective)]
    check_total([q.selected for q in queues])
    journal = journal_recovery.plan_journal(storage, request, manifest) if recovery else None
    defects = {k: v for o in outcomes for k, v in o.defects.items()}
    if journal is not None:  # after the snapshot's queues: the run publishes them first
        queues += journal.queues
    if defects and not request.skip_damaged_segments:
        names = "; ".join(f"{k}: {', '.join(v)}" for k, v in sorted(defects.items()))
        raise DamagedSegmentsError(
            f"backup {manifest.backup_id!r}: {len(defects)} segments failed verification ({names}); "
            "restore from another backup, or set skip_damaged_segments to restore the rest", defects)
    return RestorePlan(
        backup_id=manifest.backup_id, storage_url=storage.url, window_start=request.time_window_start,
        window_end=request.time_window_end, queues=tuple(queues),
        skipped_segments=tuple(s for o in outcomes for s in o.skipped) + tuple(journal.skipped if journal else ()),
        definitions_key=manifest.definitions.key if manifest.definitions else None,
        segments_verified=sum(o.verified for o in outcomes), segments_outside_window=sum(o.outside for o in outcomes),
        source_cluster=manifest.source_cluster, source_rabbitmq_version=manifest.rabbitmq_version,
        drawn_from=tuple(dict.fromkeys(owner for q in queues for owner in q.drawn_from)),
        backup_vhosts=manifest.selected_vhosts(), queue_vhosts=tuple(sorted({q.vhost for q in selected})),
        selection=request.selection_label(),
        refused_queues=tuple(o.refusal for o in outcomes if o.refusal is not None),
        journal=journal.facts if journal else None,
    )


def _check_targets_unique(selected: list[QueueBackup], request: RestoreRequest) -> None:
    seen: dict[tuple[str, str], str] = {}
    for q in selected:
        target = (request.target_vhost(q.vhost), request.target_queue(q.name))
        if target in seen:
            raise BackupNotRestorableError(
                f"queues {seen[target]} and {q.vhost}/{q.name} would both restore into {target[0]}/{target[1]}; "
                "narrow the selection or change queue_map/vhost_map")
        seen[target] = f"{q.vhost}/{q.name}"


def _plan_queue(checked: Iterator[CheckedSegment], entry: QueueBackup, request: RestoreRequest,
                chosen: tuple[int, ...] | None) -> QueueOutcome:
    """One queue's plan (or its refusal) from its segments' checks (the next of ``checked``), with the segments it
    skipped as damaged, their defects, and how many segments it verified and left out."""
    segments, skipped, defects = [], [], {}
    scan = QueueScan.start(entry, request, chosen)
    ordinal = verified = outside = 0
    for segment in islice(checked, len(entry.stored_order())):
        meta, check = segment.meta, segment.check
        assert segment.entry is entry, "checked_segments yields each queue's segments in the plan's order"
        first_ordinal, ordinal = ordinal, ordinal + meta.record_count
        in_window = count_in_window(segment, request, scan.exchanges, scan.large, scan.visit(first_ordinal),
                                    scan.published)
        verified += 1
        if not check.ok:
            defects[meta.key] = check.defects
            skipped.append(
                SkippedSegment(entry.vhost, entry.name, meta.key, meta.sequence, meta.record_count, tuple(check.defects))
            )
            continue
        if not in_window and (request.has_window or scan.narrows):
            outside += 1
            continue
        segments.append(SegmentPlan(meta.key, meta.sequence, meta.record_count, first_ordinal, in_window, meta.checksum,
                                    meta.first_timestamp, meta.last_timestamp))
    scan.check_damaged(request, ordinal, set(defects))
    refusal = scan.refusal()
    plan = None if refusal is not None else _queue_plan(entry, request, segments, scan)
    return QueueOutcome(plan, refusal, tuple(skipped), defects, verified, outside)


def _queue_plan(entry: QueueBackup, request: RestoreRequest, segments: list[SegmentPlan], scan: QueueScan) -> QueuePlan:
    offsets = entry.extensions.get("consumer_offsets") or {}
    return QueuePlan(
        source_vhost=entry.vhost, source_queue=entry.name, target_vhost=request.target_vhost(entry.vhost),
        target_queue=request.target_queue(entry.name), queue_type=entry.queue_type, records_total=entry.message_count,
        records_in_window=sum(s.in_window for s in segments), segments=tuple(segments),
        consumer_offsets={str(k): int(v) for k, v in offsets.items()} if isinstance(offsets, dict) else {},
        drawn_from=tuple(dict.fromkeys(segment_owner(s.key) for s in segments if s.in_window)),
        **scan.plan_fields(segments),
    )


def count_in_window(
    segment: CheckedSegment, request: RestoreRequest, exchanges: set[str], large: list[LargeMessage] | None = None,
    visit: selection.Visit | None = None, routes: exchange_routes.RouteCounts | None = None,
) -> int:
    """How many records of a checked segment lie inside the window (0 for a damaged one); notes their exchanges
    (and, into ``routes``, each one's exchange-mode route) and (into ``large``) those too large for some targets
    (:mod:`.message_sizes`)."""
    meta, data = segment.meta, segment.data
    if not segment.check.ok or data is None:
        return 0
    if large is not None:
        large += large_messages(data, meta, request, segment.frames)
    reads = visit is not None and visit.reads_records
    if not request.has_window and request.publish_mode == "queue" and not reads:
        return meta.record_count
    if visit is not None and not visit.wants_segment(meta.record_count):
        return 0
    count = 0
    for index, record in enumerate(iter_records(data, meta.key, request.max_decompressed_bytes)):
        if request.in_window(record.backed_up_at) and (visit is None or visit.take(index, record)):
            count += 1
            exchanges.add(record.exchange)
            if routes is not None:
                routes.add(record.exchange, record.routing_key)
    return count
