"""Recovery to a point in time T: a snapshot, then the journal's records published after it began and before T.

The snapshot is the request's backup; with ``backup_id: latest``, the last complete backup (never a journal archive)
that holds each vhost recovered and was created before T. Its queues are planned as in any restore and come first.
Then, per vhost, the journal's chain (:mod:`airflow_rbak.repository.journal_chain`) gives the archives covering
``[snapshot.created_at, T)``: each is one more entry of the plan, whose records with
``snapshot.created_at <= backed_up_at < T`` (and of that vhost) are published in stored order to their own exchange
and routing key, with all their headers (``CC`` and ``BCC`` are their route here), so the target's bindings put them
where the source's put them. A record of the default exchange goes to its routing key, mapped as the request maps
queues. Each entry checkpoints as any queue does; a resumed entry may publish again what was unconfirmed when it
stopped (at least once).

A record's ``backed_up_at`` is a lower bound of its publish time, and a snapshot captures while publishers go on,
so the recovery may put in twice what was published while the snapshot ran (``backed_up_at`` below its
``completed_at``) and what the journal delivered twice (``redelivered``): the plan counts both. Gaps of the chain
in the window, or a T past what the archives cover, refuse the recovery (the section's refusal) before anything is
touched; ``journal_accept_gaps`` recovers through the gaps, listing them.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from airflow_rbak.codec import BackupManifest, iter_records
from airflow_rbak.codec.broker_headers import broker_headers
from airflow_rbak.codec.journal_layout import JOURNAL_QUEUE, is_archive
from airflow_rbak.exceptions import RbakError
from airflow_rbak.repository.catalog import list_backups
from airflow_rbak.repository.journal_chain import JournalArchive, JournalGap, journal_chain
from airflow_rbak.repository.manifest_store import ManifestStore
from airflow_rbak.restore.errors import BackupNotRestorableError, DamagedSegmentsError
from airflow_rbak.restore.request import RestoreRequest
from airflow_rbak.restore.restore_plan import QueuePlan, SegmentPlan, SkippedSegment
from airflow_rbak.restore.segment_checks import checked_segments
from airflow_rbak.restore.wire import WireRecord, iter_wire_records
from airflow_rbak.storage.base import Storage, StorageError

#: Headers left out of a journal record's publish: only what the broker adds on delivery (the journal is a quorum
#: queue); the routing headers ``CC`` and ``BCC`` are published, they are the record's route.
JOURNAL_LEFT_OUT = broker_headers("quorum")


def snapshot_manifest(storage: Storage, request: RestoreRequest,
                      resolve: Callable[[Storage, str], BackupManifest]) -> BackupManifest:
    """The recovery's snapshot: the request's backup (read by ``resolve``, the planner's reader of a named backup), or
    for ``latest`` the newest complete non-journal backup holding every vhost recovered, created before T."""
    until = int(request.journal_until or 0)
    if request.backup_id == "latest":
        for summary in reversed(list_backups(storage)):
            if summary.status != "complete" or summary.journal_archive or (summary.created_at or 0) >= until:
                continue
            manifest = ManifestStore(storage).load(summary.backup_id)
            if set(request.vhosts) <= _vhosts_of(manifest):
                return manifest
        raise BackupNotRestorableError(
            f"{storage.url} holds no complete backup of vhost(s) {', '.join(request.vhosts)} created before "
            f"journal_until ({until}); give backup_id explicitly or a later journal_until")
    manifest = resolve(storage, request.backup_id)
    if is_archive(manifest):
        raise BackupNotRestorableError(f"{manifest.backup_id!r} is a journal archive, not a snapshot; name a backup")
    if manifest.created_at >= until:
        raise BackupNotRestorableError(f"backup {manifest.backup_id!r} was created at {manifest.created_at}, not before "
                                       f"journal_until ({until}); recover from an earlier backup")
    return manifest


def _vhosts_of(manifest: BackupManifest) -> set[str]:
    return set(manifest.selected_vhosts() or ()) | {q.vhost for q in manifest.queues}


@dataclass
class JournalPlan:
    """The journal's part of a recovery: its plan entries, the segments it skipped, and the facts the section shows."""

    queues: list[QueuePlan] = field(default_factory=list)
    skipped: list[SkippedSegment] = field(default_factory=list)
    facts: dict[str, Any] = field(default_factory=dict)


def plan_journal(storage: Storage, request: RestoreRequest, snapshot: BackupManifest) -> JournalPlan:
    """Plan the journal entries of every vhost recovered (see the module docstring); damaged segments of an archive
    refuse the recovery unless ``skip_damaged_segments``, then they are listed as skipped and as gaps."""
    until = int(request.journal_until or 0)
    created = snapshot.created_at
    result = JournalPlan()
    vhosts: list[dict[str, Any]] = []
    defects: dict[str, list[str]] = {}
    for vhost in request.vhosts:
        chain = journal_chain(storage, vhost)
        gaps = list(chain.gaps_in(created, until))
        cover = chain.coverage
        if cover is not None and created < cover[0]:
            gaps.insert(0, JournalGap(created, cover[0], f"the journal's first archive begins at {cover[0]}, after "
                                                         "the snapshot was created"))
        start = window_start(storage, request, chain.covering(created, until), created)
        archives = []
        for archive in chain.covering(start, until):
            entry, skipped, found, stats = _plan_archive(storage, request, archive, start, until,
                                                         snapshot.completed_at)
            defects |= found
            result.skipped += skipped
            gaps += [JournalGap(archive.from_ms, archive.to_ms, f"{archive.backup_id}: segment {s.key} skipped as "
                                                                f"damaged ({', '.join(s.reasons)})") for s in skipped]
            result.queues.append(entry)
            archives.append(stats)
        vhosts.append({"vhost": vhost, "target_vhost": request.target_vhost(vhost), "from": start,
                       "coverage": None if cover is None else list(cover), "archives": archives,
                       "gaps": [g.to_json() for g in gaps],
                       "refused_archives": [{"backup_id": b, "reason": r} for b, r in chain.refused]})
    if defects and not request.skip_damaged_segments:
        names = "; ".join(f"{k}: {', '.join(v)}" for k, v in sorted(defects.items()))
        raise DamagedSegmentsError(f"{len(defects)} journal segments failed verification ({names}); set "
                                   "skip_damaged_segments to recover through them as gaps", defects)
    snapshot_messages = sum(q.message_count for q in snapshot.queues if q.vhost in request.vhosts)
    result.facts = {"until": until, "accept_gaps": request.journal_accept_gaps, "snapshot": snapshot.backup_id,
                    "snapshot_created_at": created, "snapshot_completed_at": snapshot.completed_at,
                    "snapshot_messages": snapshot_messages, "vhosts": vhosts,
                    "left_out": snapshot_left_out(snapshot, request.vhosts)}
    return result


#: Queues the snapshot left out that a plan lists (the manifest is untrusted: a longer list is cut, and says so).
MAX_LEFT_OUT_LISTED = 200


def snapshot_left_out(snapshot: BackupManifest, vhosts: Sequence[str]) -> list[dict[str, str]]:
    """The queues of the recovered vhosts the snapshot left out (``left_out``), but the journal's own: the journal
    brings only what was published into them after the snapshot began, never what they held then."""
    listed = snapshot.extensions.get("left_out")
    found: list[dict[str, str]] = []
    for entry in listed if isinstance(listed, list) else []:
        if not isinstance(entry, dict) or entry.get("vhost") not in vhosts or entry.get("queue") == JOURNAL_QUEUE:
            continue
        if len(found) == MAX_LEFT_OUT_LISTED:
            found.append({"vhost": "", "queue": "", "reason": f"more than {MAX_LEFT_OUT_LISTED} queues left out"})
            break
        found.append({k: str(entry.get(k, ""))[:300] for k in ("vhost", "queue", "reason")})
    return found


def window_start(storage: Storage, request: RestoreRequest, archives: list[JournalArchive], created: int) -> int:
    """The first ``backed_up_at`` a recovery from a snapshot created at ``created`` replays: the last clock mark at or
    before that moment, as the archives show it (an archive's ``from``, a record's bound; ``created`` itself when no
    archive begins before it).

    A record's ``backed_up_at`` is the last mark before its publish, and between archive runs no mark is published:
    a message published after the snapshot began may carry a mark from before it. So the window starts at that mark,
    not at ``created``: what it takes in published before the snapshot may be in it too (counted as possible
    duplicates), and nothing published after the snapshot began is left out."""
    start: int | None = None
    for archive in archives:
        if archive.from_ms > created:
            break
        start = max(start or 0, archive.from_ms)
        for meta in archive.entry.stored_order():
            if meta.first_timestamp is not None and meta.first_timestamp > created:
                break
            try:
                data = storage.get(meta.key)
                bounds = [r.backed_up_at for r in iter_records(data, meta.key, request.max_decompressed_bytes)]
            except (StorageError, RbakError):  # damaged: the plan's verification names it
                continue
            start = max([start or 0, *(b for b in bounds if b <= created)])
    return created if start is None else start


def _plan_archive(storage: Storage, request: RestoreRequest, archive: JournalArchive, start: int, until: int,
                  completed: int | None) -> tuple[QueuePlan, list[SkippedSegment], dict[str, list[str]], dict[str, Any]]:
    """One archive's plan entry: its segments verified, its records in the window counted (those published while
    the snapshot ran and those the journal redelivered, apart)."""
    entry = archive.entry
    segments, skipped, defects = [], [], {}
    exchanges: set[str] = set()
    ordinal = in_window = during = redelivered = 0
    for checked in checked_segments(storage, ((entry, meta) for meta in entry.stored_order()),
                                    request.max_decompressed_bytes):
        meta, check, data = checked.meta, checked.check, checked.data
        first, ordinal = ordinal, ordinal + meta.record_count
        if not check.ok or data is None:
            defects[meta.key] = check.defects
            skipped.append(SkippedSegment(entry.vhost, entry.name, meta.key, meta.sequence, meta.record_count,
                                          tuple(check.defects)))
            continue
        count = 0
        for record in iter_records(data, meta.key, request.max_decompressed_bytes):
            if record.source_vhost == archive.vhost and start <= record.backed_up_at < until:
                count += 1
                exchanges.add(record.exchange)
                redelivered += record.redelivered
                during += completed is not None and record.backed_up_at < completed
        in_window += count
        if count:
            segments.append(SegmentPlan(meta.key, meta.sequence, meta.record_count, first, count, meta.checksum,
                                        meta.first_timestamp, meta.last_timestamp))
    plan = QueuePlan(
        source_vhost=archive.vhost, source_queue=f"{JOURNAL_QUEUE}@{archive.backup_id}",
        target_vhost=request.target_vhost(archive.vhost), target_queue="", queue_type="quorum",
        records_total=entry.message_count, records_in_window=in_window, segments=tuple(segments),
        exchanges=tuple(sorted(exchanges)), drawn_from=(archive.backup_id,), journal_archive=archive.backup_id,
        journal_from=start)
    stats = {"backup_id": archive.backup_id, "from": archive.from_ms, "to": archive.to_ms, "records": in_window,
             "redelivered": redelivered, "during_snapshot": during}
    return plan, skipped, defects, stats


def iter_journal_records(storage: Storage, queue: QueuePlan, request: RestoreRequest, start_ordinal: int = 0
                         ) -> Iterator[tuple[int, str, int, WireRecord, tuple[str, str]]]:
    """The journal entry's records in the window from ``start_ordinal`` on, in stored order, as ``(ordinal, segment
    key, index, record, route)``: the route is the record's own exchange and routing key (the default exchange's:
    the routing key as the request maps queue names)."""
    until, start = int(request.journal_until or 0), int(queue.journal_from or 0)
    for segment in queue.segments:
        if segment.first_ordinal + segment.record_count <= start_ordinal:
            continue
        data = storage.get(segment.key)
        digest = hashlib.sha256(data).hexdigest()
        if digest != segment.checksum:
            raise DamagedSegmentsError(f"{segment.key} changed since the plan verified it (SHA-256 {digest}); plan the "
                                       "recovery again", {segment.key: ["SHA-256 differs from the plan's"]})
        wire = iter_wire_records(data, segment.key, request.max_decompressed_bytes, JOURNAL_LEFT_OUT)
        for index, record in enumerate(wire):
            ordinal = segment.first_ordinal + index
            if ordinal < start_ordinal or record.source_vhost != queue.source_vhost \
                    or not start <= record.backed_up_at < until:
                continue
            route = (record.exchange, record.routing_key) if record.exchange else (
                "", request.target_queue(record.routing_key))
            yield ordinal, segment.key, index, record, route
