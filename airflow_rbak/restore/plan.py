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

import json
from dataclasses import asdict, dataclass, field
from typing import Any

from airflow_rbak.codec import BackupManifest, QueueBackup, SegmentMetadata, iter_records
from airflow_rbak.codec.errors import ManifestError
from airflow_rbak.codec.record_summary import FrameLengths
from airflow_rbak.display import package_logger
from airflow_rbak.repository.catalog import NoCompleteBackupError, resolve_backup_id
from airflow_rbak.repository.chain import segment_owner
from airflow_rbak.repository.manifest_store import ManifestNotFoundError, ManifestStore
from airflow_rbak.repository.ownership import foreign_objects
from airflow_rbak.repository.segment_check import SegmentCheck, check_segment_bytes
from airflow_rbak.restore import exchange_routes, selection, target_compatibility
from airflow_rbak.restore.checkpoints import QueueCheckpoint
from airflow_rbak.restore.dead_letters import DeathRoutes
from airflow_rbak.restore.errors import BackupNotRestorableError, DamagedSegmentsError
from airflow_rbak.restore.message_sizes import LargeMessage, large_messages
from airflow_rbak.restore.request import RestoreRequest
from airflow_rbak.storage.base import ObjectNotFoundError, Storage, StorageError

log = package_logger(__name__)
#: Reads of a segment before it is called damaged (a body cut short in transfer is not damage).
READ_ATTEMPTS = 3


@dataclass(frozen=True)
class SegmentPlan:
    """One segment the restore reads; ``first_ordinal`` is its first record's position in the queue."""

    key: str
    sequence: int
    record_count: int
    first_ordinal: int
    in_window: int
    checksum: str
    first_timestamp: int | None = None
    last_timestamp: int | None = None


@dataclass(frozen=True)
class SkippedSegment:
    """A damaged segment left out because the user allowed it: what it held and why it was skipped."""

    vhost: str
    queue: str
    key: str
    sequence: int
    record_count: int
    reasons: tuple[str, ...]


@dataclass(frozen=True)
class QueuePlan:
    """One source queue, where it goes, and how many of its records the window keeps."""

    source_vhost: str
    source_queue: str
    target_vhost: str
    target_queue: str
    queue_type: str
    records_total: int
    records_in_window: int
    segments: tuple[SegmentPlan, ...]
    exchanges: tuple[str, ...] = ()
    consumer_offsets: dict[str, int] = field(default_factory=dict)
    #: The target as the plan found it (:mod:`.target`): messages held (None: no such queue), whether this
    #: restore's checkpoint says it already began there, and what it confirmed then.
    target_depth: int | None = None
    resumes: bool = False
    published_before: int = 0
    completed_before: bool = False
    #: The checkpoint's next record at plan time: with the three above, the resume point the plan pins (``contract``).
    resume_ordinal: int = 0
    #: exchange mode: the other non-empty queues of the target vhost, where bindings may route records.
    vhost_depths: dict[str, int] = field(default_factory=dict)
    #: The backups whose segments hold this queue's records in the window, in chain order (:mod:`repository.chain`).
    drawn_from: tuple[str, ...] = ()
    #: The type the target queue gets when a transformation converts it (None: the backup's ``queue_type``).
    target_queue_type: str | None = None
    #: Records in the window whose body is over ``message_sizes.LARGE_MESSAGE_BYTES``: (segment key, index, bytes).
    large_messages: tuple[LargeMessage, ...] = ()
    #: Why the target will deliver this queue's messages in another order than the source (:mod:`.delivery_order`).
    delivery_order_warning: str | None = None
    #: A selective restore's positions of this queue, as sorted half-open ranges (None: every record in the window;
    #: :mod:`.selection`); ``chosen``: how many positions the request named for it (None: none named).
    selected: tuple[tuple[int, int], ...] | None = None
    chosen: int | None = None
    #: The first few selected records (position, ids, route, size; never the body), as a dry run shows them.
    first_matches: tuple[dict[str, Any], ...] = ()
    #: Dead-letter replay (:mod:`.dead_letters`): records go to ``(exchange, routing key, count)`` of their death,
    #: never into the target queue.
    replay: bool = False
    replay_routes: tuple[tuple[str, str, int], ...] = ()
    #: Exchange mode (:mod:`.exchange_routes`): ``(exchange, routing key, count)`` of the routes the records in the
    #: window (and selection) are published with, the most used first; the routes and messages left out of it; and
    #: whether that count of routes is exact. Empty in queue mode and for a replay.
    routes: tuple[tuple[str, str, int], ...] = ()
    routes_more: tuple[int, int] = (0, 0)
    routes_exact: bool = True

    @property
    def to_add(self) -> int:
        """Records this run will still publish (a finished restore adds nothing; a resumed one the rest)."""
        return 0 if self.completed_before else max(self.records_in_window - self.published_before, 0)

    @property
    def task_id(self) -> str:
        """A stable label for logs and mapped-task names."""
        return f"{self.source_vhost}/{self.source_queue}"


@dataclass(frozen=True)
class RestorePlan:
    """Everything a restore will do, computed without touching the target broker."""

    backup_id: str
    storage_url: str
    window_start: int | None
    window_end: int | None
    queues: tuple[QueuePlan, ...]
    skipped_segments: tuple[SkippedSegment, ...] = ()
    definitions_key: str | None = None
    segments_verified: int = 0
    segments_outside_window: int = 0
    source_cluster: str | None = None
    target_cluster: str | None = None
    target_cluster_id: str | None = None
    definitions_changes: dict[str, Any] | None = None
    drawn_from: tuple[str, ...] = ()
    #: What the transformations did to the definitions (``restore.migration``); None when none are named.
    migration: dict[str, Any] | None = None
    #: The vhosts the backup was asked for (its definitions export holds every vhost); None: every vhost.
    backup_vhosts: tuple[str, ...] | None = None
    #: The source vhosts of the queues this restore selects: whose definitions a manifest naming no vhosts imports.
    queue_vhosts: tuple[str, ...] = ()
    #: The definitions export and the import as checksums (``contract.DefinitionsPin`` JSON); the definitions step
    #: refuses when either changed after approval.
    definitions_pin: dict[str, Any] | None = None
    #: Every object the definitions import creates or replaces, with what acts beyond it (``import_view``).
    definitions_import: list[dict[str, Any]] | None = None
    #: The target's ``max_message_size`` and where it was read (:mod:`.message_sizes`); None: not inspected.
    target_max_message_size: int | None = None
    target_message_size_source: str | None = None
    #: What the target's version does with the definitions it treats differently (``target_compatibility``).
    definitions_compatibility: list[dict[str, str]] | None = None
    #: The runtime parameters (operator policies, ...) of the imported vhosts that a restore does not import.
    definitions_not_imported: list[dict[str, str]] | None = None
    #: The RabbitMQ versions of the source (the backup's manifest) and of the target (when inspected).
    source_rabbitmq_version: str | None = None
    target_rabbitmq_version: str | None = None
    #: The selection in one line (``selection.describe``); None: every record of the window.
    selection: str | None = None
    #: Queues left out before anything was published, each ``{"vhost", "queue", "reason"}`` (a dead-letter queue
    #: whose records give no route to replay them to); the report fails naming them, the others are restored.
    refused_queues: tuple[dict[str, str], ...] = ()

    @property
    def records_in_window(self) -> int:
        return sum(q.records_in_window for q in self.queues)

    def queue(self, source_vhost: str, source_queue: str) -> QueuePlan:
        for q in self.queues:
            if (q.source_vhost, q.source_queue) == (source_vhost, source_queue):
                return q
        raise BackupNotRestorableError(f"queue {source_queue!r} of vhost {source_vhost!r} is not in the restore plan")

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, obj: dict[str, Any]) -> RestorePlan:
        queues = tuple(
            QueuePlan(
                **{
                    **q,
                    "segments": tuple(SegmentPlan(**s) for s in q["segments"]),
                    "exchanges": tuple(q.get("exchanges", ())),
                    "drawn_from": tuple(q.get("drawn_from", ())),
                    "large_messages": tuple(tuple(m) for m in q.get("large_messages", ())),
                    "selected": None if q.get("selected") is None else tuple(tuple(r) for r in q["selected"]),
                    "first_matches": tuple(q.get("first_matches", ())),
                    "replay_routes": tuple(tuple(r) for r in q.get("replay_routes", ())),
                    "routes": tuple(tuple(r) for r in q.get("routes", ())),
                    "routes_more": tuple(q.get("routes_more", (0, 0))),
                }
            )
            for q in obj["queues"]
        )
        skipped = tuple(SkippedSegment(**{**s, "reasons": tuple(s["reasons"])}) for s in obj.get("skipped_segments", ()))
        vhosts = obj.get("backup_vhosts")
        return cls(**{**obj, "queues": queues, "skipped_segments": skipped, "drawn_from": tuple(obj.get("drawn_from", ())),
                      "backup_vhosts": tuple(vhosts) if vhosts is not None else None,
                      "queue_vhosts": tuple(obj.get("queue_vhosts", ())),
                      "refused_queues": tuple(obj.get("refused_queues", ()))})

    def summary_lines(self) -> list[str]:
        """The plan as a few log lines (no secrets: the storage URL is already credential-free)."""
        lines = [
            f"restore plan for backup {self.backup_id} from {self.storage_url}, window "
            f"{self.window_start}..{self.window_end}: {len(self.queues)} queues, {self.records_in_window} records, "
            f"drawn from backups {', '.join(self.drawn_from) or '-'}",
            f"  source cluster {self.source_cluster or '(unknown)'} -> target cluster {self.target_cluster or '(not inspected)'}"
            + (" (THE SAME CLUSTER)" if self.source_cluster and self.source_cluster == self.target_cluster else ""),
        ]
        for q in self.queues:
            now = "no such queue" if q.target_depth is None else f"holds {q.target_depth}"
            kind = q.queue_type + (f" -> {q.target_queue_type}" if q.target_queue_type else "")
            where = f"{q.target_vhost}/{q.target_queue}" + (" (replayed where each record died)" if q.replay else "")
            lines.append(f"  {q.source_vhost}/{q.source_queue} ({kind}) -> {where}: "
                         f"{q.records_in_window} of {q.records_total} records in {len(q.segments)} segments "
                         f"from {', '.join(q.drawn_from) or '-'}; target {now}, "
                         f"adds {q.to_add}" + (f" (resuming: {q.published_before} confirmed before)" if q.resumes else ""))
            lines += exchange_routes.summary_lines(q)
            if q.delivery_order_warning:
                lines.append(f"    WARNING: {q.delivery_order_warning}")
        changes = self.definitions_changes
        if changes:
            lines.append(f"  definitions ({changes['mode']} mode): create {changes['create'] or 'nothing'}; "
                         f"existing and different (replaced only in replace mode): {changes['replace'] or 'none'}; "
                         f"different but kept in either mode (delete them first to take the backup's): "
                         f"{changes.get('cannot_replace') or 'none'}")
            for entry in self.definitions_import or []:
                item = {k: v for k, v in entry["item"].items() if k != "vhost"}
                notes = {k: v for k, v in entry["notes"].items() if v}
                lines.append(f"    {entry['action']} {entry['label']}: {json.dumps(item, sort_keys=True)}"
                             + (f" {json.dumps(notes, sort_keys=True)}" if notes else ""))
            if self.backup_vhosts:
                lines.append(f"  the backup was asked for vhosts {', '.join(map(repr, self.backup_vhosts))}: "
                             "unless this restore names vhosts or a definitions selection, only their definitions")
        if self.definitions_not_imported:
            lines.append("  not imported (a restore imports no runtime parameters; set them on the target yourself): "
                         + ", ".join(f"{p['kind']} {p['vhost']}/{p['name']}" for p in self.definitions_not_imported))
        lines += target_compatibility.summary_lines(self.definitions_compatibility)
        for s in self.skipped_segments:
            lines.append(f"  SKIPPED damaged segment {s.key} ({s.record_count} records): {'; '.join(s.reasons)}")
        return lines


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


def plan_restore(storage: Storage, settings: RestoreRequest) -> RestorePlan:
    """Read the manifest, verify the segments the window needs, count what will be published."""
    manifest = resolve_manifest(storage, settings.backup_id)
    foreign = foreign_objects(manifest)
    if foreign:
        raise BackupNotRestorableError(
            f"the manifest of backup {manifest.backup_id!r} names objects that are not its own "
            f"({'; '.join(f'{k}: {r}' for k, r in foreign[:5])}); nothing was read from them. "
            "Run `rbak validate --deep`, then restore from another backup or `rbak manifest rebuild --replace`")
    selected = [q for q in manifest.queues if settings.selects(q.vhost, q.name)]
    chosen = selection.chosen_for(settings.positions, [(q.vhost, q.name) for q in selected])
    if settings.positions:  # chosen positions restore only the queues they name
        selected = [q for q in selected if (q.vhost, q.name) in chosen]
    _check_targets_unique(selected, settings)
    queues, skipped, defects, refused = [], [], {}, []
    verified = outside = 0
    for entry in selected:
        plan, queue_skipped, queue_defects, queue_verified, queue_outside = _plan_queue(
            storage, entry, settings, chosen.get((entry.vhost, entry.name)))
        skipped += queue_skipped
        defects.update(queue_defects)
        verified += queue_verified
        outside += queue_outside
        if isinstance(plan, dict):
            refused.append(plan)
        elif plan.records_in_window or not settings.selective:  # a selective restore touches only queues it selects
            queues.append(plan)
    selection.check_ranges(sum(len(q.selected or ()) for q in queues))
    if defects and not settings.skip_damaged_segments:
        names = "; ".join(f"{k}: {', '.join(v)}" for k, v in sorted(defects.items()))
        raise DamagedSegmentsError(
            f"backup {manifest.backup_id!r}: {len(defects)} segments failed verification ({names}); "
            "restore from another backup, or set skip_damaged_segments to restore the rest", defects)
    return RestorePlan(
        backup_id=manifest.backup_id, storage_url=storage.url, window_start=settings.time_window_start,
        window_end=settings.time_window_end, queues=tuple(queues), skipped_segments=tuple(skipped),
        definitions_key=manifest.definitions.key if manifest.definitions else None,
        segments_verified=verified, segments_outside_window=outside, source_cluster=manifest.source_cluster,
        source_rabbitmq_version=manifest.rabbitmq_version,
        drawn_from=tuple(dict.fromkeys(owner for q in queues for owner in q.drawn_from)),
        backup_vhosts=manifest.selected_vhosts(), queue_vhosts=tuple(sorted({q.vhost for q in selected})),
        selection=settings.selection_label(), refused_queues=tuple(refused),
    )


def queue_checkpoint(plan: RestorePlan, queue: QueuePlan, settings: RestoreRequest) -> QueueCheckpoint:
    """The checkpoint key of one queue of this restore: target cluster, location, backup, queues, window."""
    if not plan.target_cluster_id:
        raise BackupNotRestorableError("the plan does not name its target cluster; plan the restore again")
    label = settings.window_label() + selection.checkpoint_label(queue.selected, queue.replay)
    return QueueCheckpoint(plan.backup_id, queue.source_vhost, queue.source_queue, queue.target_vhost, queue.target_queue,
                           label, target_cluster=plan.target_cluster_id, location=plan.storage_url)


def _check_targets_unique(selected: list[QueueBackup], settings: RestoreRequest) -> None:
    seen: dict[tuple[str, str], str] = {}
    for q in selected:
        target = (settings.target_vhost(q.vhost), settings.target_queue(q.name))
        if target in seen:
            raise BackupNotRestorableError(
                f"queues {seen[target]} and {q.vhost}/{q.name} would both restore into {target[0]}/{target[1]}; "
                "narrow the selection or change queue_map/vhost_map")
        seen[target] = f"{q.vhost}/{q.name}"


def _plan_queue(storage: Storage, entry: QueueBackup, settings: RestoreRequest,
                chosen: tuple[int, ...] | None) -> tuple:
    """One queue's plan (or, for a dead-letter replay it must refuse, ``{"vhost", "queue", "reason"}``), with the
    segments it skipped as damaged, their defects, and how many segments it verified and left out."""
    segments, skipped, defects = [], [], {}
    exchanges: set[str] = set()
    large: list[LargeMessage] = []
    ordered = entry.stored_order()
    label = f"{entry.vhost}/{entry.name}"
    if chosen is not None:  # refused before any segment is read
        selection.check_in_range(label, chosen, sum(m.record_count for m in ordered), ())
    scan = selection.SelectionScan(settings.select, chosen) if settings.selective else None
    routes = DeathRoutes() if settings.replays(entry.name) else None
    published = (exchange_routes.RouteCounts(settings.target_queue(entry.name))
                 if settings.publish_mode == "exchange" and routes is None else None)
    ordinal = verified = outside = 0
    for meta in ordered:
        first_ordinal, ordinal = ordinal, ordinal + meta.record_count
        check, in_window = verify_and_count(storage, entry, meta, settings, exchanges, large,
                                            selection.Visit(first_ordinal, scan, routes), published)
        verified += 1
        if not check.ok:
            defects[meta.key] = check.defects
            skipped.append(
                SkippedSegment(entry.vhost, entry.name, meta.key, meta.sequence, meta.record_count, tuple(check.defects))
            )
            continue
        if not in_window and (settings.has_window or scan is not None):
            outside += 1
            continue
        segments.append(SegmentPlan(meta.key, meta.sequence, meta.record_count, first_ordinal, in_window, meta.checksum,
                                    meta.first_timestamp, meta.last_timestamp))
    if chosen is not None and settings.skip_damaged_segments:
        selection.check_in_range(label, chosen, ordinal, selection.spans(ordered, set(defects)))
    if routes is not None and routes.refusal(label) is not None:
        return {"vhost": entry.vhost, "queue": entry.name, "reason": routes.refusal(label)}, skipped, defects, verified, outside
    offsets = entry.extensions.get("consumer_offsets") or {}
    plan = QueuePlan(
        source_vhost=entry.vhost, source_queue=entry.name, target_vhost=settings.target_vhost(entry.vhost),
        target_queue=settings.target_queue(entry.name), queue_type=entry.queue_type, records_total=entry.message_count,
        records_in_window=sum(s.in_window for s in segments),
        segments=tuple(segments), exchanges=tuple(sorted(routes.exchanges() if routes is not None else exchanges)),
        consumer_offsets={str(k): int(v) for k, v in offsets.items()} if isinstance(offsets, dict) else {},
        drawn_from=tuple(dict.fromkeys(segment_owner(s.key) for s in segments if s.in_window)),
        large_messages=selection.selected_large(large, {s.key: s.first_ordinal for s in segments},
                                                None if scan is None else scan.ranges),
        selected=None if scan is None else tuple((a, b) for a, b in scan.ranges),
        chosen=None if chosen is None else len(chosen),
        first_matches=() if scan is None else tuple(scan.first_matches),
        replay=routes is not None, replay_routes=() if routes is None else routes.table(),
        **_route_fields(published),
    )
    return plan, skipped, defects, verified, outside


def _route_fields(published: exchange_routes.RouteCounts | None) -> dict[str, Any]:
    """The queue plan's exchange-mode routes (none in queue mode, or for a replay)."""
    if published is None:
        return {}
    return {"routes": published.table(), "routes_more": published.more(), "routes_exact": published.exact}


def _fetch_checked(storage: Storage, entry: QueueBackup, meta: SegmentMetadata, settings: RestoreRequest,
                   frames: FrameLengths | None = None) -> tuple[SegmentCheck, bytes | None]:
    check = SegmentCheck(meta.key, entry.vhost, entry.name, meta.sequence)
    try:
        data = storage.get(meta.key)
    except ObjectNotFoundError:
        check.defects.append("missing")
        return check, None
    except StorageError as exc:
        check.defects.append(f"cannot be read: {exc}")
        return check, None
    check_segment_bytes(data, entry.vhost, entry.name, meta, check, settings.max_decompressed_bytes, frames)
    return check, data


def verify_and_count(
    storage: Storage, entry: QueueBackup, meta: SegmentMetadata, settings: RestoreRequest, exchanges: set[str],
    large: list[LargeMessage] | None = None, visit: selection.Visit | None = None,
    routes: exchange_routes.RouteCounts | None = None,
) -> tuple[SegmentCheck, int]:
    """Verify one segment completely; count its records inside the window, note their exchanges (and, into
    ``routes``, each one's exchange-mode route) and (into ``large``) those too large for some targets
    (:mod:`.message_sizes`).

    A segment that fails because it came back shorter or longer than the manifest says is read again (up to
    :data:`READ_ATTEMPTS` reads) before it is called damaged: a body cut short in transfer fails the same checks,
    and skipping an intact segment would lose its records. Bytes of the right size that fail are damaged: read once.
    """
    frames = FrameLengths()  # the check's one pass notes the longest record, so the listing rarely reads it again
    check, data = _fetch_checked(storage, entry, meta, settings, frames)
    for _ in range(READ_ATTEMPTS - 1):
        if check.ok or not check.read or (data is not None and len(data) == meta.size_bytes):
            break
        frames = FrameLengths()
        check, data = _fetch_checked(storage, entry, meta, settings, frames)
    if not check.ok or data is None:
        return check, 0
    if large is not None:
        large += large_messages(data, meta, settings, frames)
    reads = visit is not None and visit.reads_records
    if not settings.has_window and settings.publish_mode == "queue" and not reads:
        return check, meta.record_count
    if visit is not None and not visit.wants_segment(meta.record_count):
        return check, 0
    count = 0
    for index, record in enumerate(iter_records(data, meta.key, settings.max_decompressed_bytes)):
        if settings.in_window(record.backed_up_at) and (visit is None or visit.take(index, record)):
            count += 1
            exchanges.add(record.exchange)
            if routes is not None:
                routes.add(record.exchange, record.routing_key)
    return check, count
