"""A second copy: complete, verified backups copied to another location, whole chains, manifest last (no Airflow here).

restic's ``copy`` and pgBackRest's repositories are the model: the destination is a location of its own, as
``rbak list``, ``rbak_verify``, ``rbak_restore`` and ``rbak_freshness`` read any location, with its own retention.

- **What goes.** A backup that is ``complete`` at the source (:mod:`airflow_rbak.repository.catalog`): every
  object its manifest lists (its segments, the segments of the backups its stream chains continue, its
  definitions) and then the manifest itself, byte for byte. A chain base that is complete at the source and
  not at the destination is copied too, before the backup that continues it.
- **Checked twice.** Each segment's bytes are checked against the source manifest's SHA-256 before they are
  written (a damaged source backup is refused, named with the object and reason, and what this copy wrote in
  its folder is removed; the others proceed). When every object is in place the backup is validated *at the
  destination* as ``rbak validate --deep`` would, with the manifest not yet there, and only then is the
  manifest written: a half copy never looks complete, to a reader or to this module.
- **Idempotent, resumable.** A backup whose manifest is at the destination with the same bytes is skipped
  without reading anything else. An object already at the destination at its listed size is not written again
  (an interrupted copy resumes where it stopped); the validation at the destination still reads it.
- **Under the destination's chain lock.** Each backup is written while the destination's chain lock is held
  (:mod:`airflow_rbak.repository.chain_link`), and so is the destination's retention, so neither ever sees the
  other's half-done work. The source is only read (its credentials may be read-only).
- **The destination's retention.** With a policy, a backup that policy would remove at once is not copied, and
  after the copies the policy is applied at the destination (never removing the newest backup copied).

The copy runs in the process that calls it, a few objects at a time (``workers``): its cost is moving bytes.
"""

from __future__ import annotations

import hashlib
import threading
import time
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from typing import Any

from airflow_rbak.codec import BackupManifest, SegmentMetadata
from airflow_rbak.codec.layout import check_backup_id, manifest_key
from airflow_rbak.codec.manifest import MAX_MANIFEST_BYTES
from airflow_rbak.display import package_logger
from airflow_rbak.exceptions import RbakError
from airflow_rbak.repository.catalog import LATEST, BackupSummary, list_backups
from airflow_rbak.repository.chain_link import ChainLock
from airflow_rbak.repository.lock import LeasedStorage
from airflow_rbak.repository.retention import RetentionPolicy, apply_retention, removal_reasons
from airflow_rbak.repository.validate import validate_backup
from airflow_rbak.storage.base import ObjectInfo, ObjectNotFoundError, Storage, StorageError, read_bounded

log = package_logger(__name__)

COPIED, ALREADY_THERE, REFUSED, LEFT_OUT = "copied", "already there", "refused", "left out"


class CopyRefusedError(RbakError):
    """One backup cannot be copied (damaged at the source, or failing validation at the destination)."""


@dataclass
class BackupCopy:
    """What happened to one backup: ``outcome`` is copied, already there, refused or left out, ``reason`` why."""

    backup_id: str
    outcome: str
    reason: str | None = None
    objects_copied: int = 0
    objects_already_there: int = 0
    bytes_copied: int = 0
    #: The backup whose chain brought this one (None when it was asked for).
    brought_by: str | None = None


@dataclass
class CopyReport:
    """One copy run: every backup considered, and the destination's retention when one was applied."""

    source: str
    destination: str
    backups: list[BackupCopy] = field(default_factory=list)
    retention_deleted: list[str] = field(default_factory=list)

    def ids(self, outcome: str) -> list[str]:
        return [b.backup_id for b in self.backups if b.outcome == outcome]

    def describe(self) -> str:
        """One line: how many were copied, already there, refused (named) and left out."""
        copied, there, refused = self.ids(COPIED), self.ids(ALREADY_THERE), self.ids(REFUSED)
        text = f"copied {len(copied)} backup(s) to {self.destination}, {len(there)} already there"
        if not copied:
            text += " (nothing to copy)"
        if refused:
            text += f"; refused {len(refused)}: {', '.join(refused)}"
        return text

    def to_json(self) -> dict[str, Any]:
        return {**asdict(self), "copied": self.ids(COPIED), "already_there": self.ids(ALREADY_THERE),
                "refused": self.ids(REFUSED)}


def copy_backups(source: Storage, destination: Storage, backup_ids: Sequence[str] | None = None, *,
                 retention: RetentionPolicy | None = None, now_ms: int | None = None, workers: int = 4,
                 chain_lock_wait: float = 900.0) -> CopyReport:
    """Copy ``backup_ids`` (every complete backup of ``source`` when None; ``latest`` names the newest) to
    ``destination``, with the chain bases they need; see the module docstring for what is checked."""
    now_ms = int(time.time() * 1000) if now_ms is None else now_ms
    at_source = {b.backup_id: b for b in list_backups(source, now_ms=now_ms)}
    at_destination = {b.backup_id: b for b in list_backups(destination, now_ms=now_ms)}
    report = CopyReport(source.url, destination.url)
    for backup_id, brought_by in _plan(at_source, at_destination, backup_ids):
        found = at_source.get(backup_id)
        if found is None or found.status != "complete":
            why = "not at the source" if found is None else f"{found.status} at the source: {found.problem or 'not complete'}"
            report.backups.append(BackupCopy(backup_id, REFUSED, why, brought_by=brought_by))
            continue
        report.backups.append(BackupCopy(backup_id, "", brought_by=brought_by))
    _leave_out_what_retention_removes(report, at_source, at_destination, retention, now_ms)
    for entry in report.backups:
        if not entry.outcome:
            _copy_under_lock(source, destination, entry, workers, chain_lock_wait)
    copied = report.ids(COPIED)
    if retention is not None and retention.active and copied:
        done = apply_retention(destination, retention, now_ms=now_ms, protect=copied[-1],
                               chain_lock=ChainLock(destination, "rbak copy: the destination's retention",
                                                    wait=chain_lock_wait))
        report.retention_deleted = done.deleted
    log.info("%s", report.describe())
    return report


def _plan(at_source: dict[str, BackupSummary], at_destination: dict[str, BackupSummary],
          backup_ids: Sequence[str] | None) -> Iterator[tuple[str, str | None]]:
    """The backups to consider, oldest first, each with the backup whose chain brought it (None if asked for)."""
    complete = sorted((b for b in at_source.values() if b.status == "complete"), key=lambda b: (b.created_at or 0, b.backup_id))
    if backup_ids is None:
        asked = [b.backup_id for b in complete]
    else:
        asked = [complete[-1].backup_id if b == LATEST and complete else check_backup_id(b) for b in backup_ids]
    order: dict[str, str | None] = {}
    for backup_id in asked:
        found = at_source.get(backup_id)
        for base in found.depends_on if found is not None else ():
            base_found, there = at_source.get(base), at_destination.get(base)
            if base_found is not None and base_found.status == "complete" and (there is None or there.status != "complete"):
                order.setdefault(base, backup_id)
        order.setdefault(backup_id, None)
        order[backup_id] = None  # asked for itself, whatever brought it before

    def created(backup_id: str) -> tuple[int, str]:
        found = at_source.get(backup_id)
        return (found.created_at or 0) if found else 0, backup_id

    return iter(sorted(order.items(), key=lambda item: created(item[0])))


def _leave_out_what_retention_removes(report: CopyReport, at_source: dict[str, BackupSummary],
                                      at_destination: dict[str, BackupSummary], retention: RetentionPolicy | None,
                                      now_ms: int) -> None:
    """Mark the backups the destination's policy would remove right after copying them: they are not copied."""
    pending = [b for b in report.backups if not b.outcome
               and (b.backup_id not in at_destination or at_destination[b.backup_id].status != "complete")]
    if retention is None or not retention.active or not pending:
        return
    merged = {**at_destination, **{b.backup_id: at_source[b.backup_id] for b in pending}}
    considered = [b for b in report.backups if not b.outcome]  # the newest of them is what a copy is for: protected
    newest = max(considered, key=lambda b: (at_source[b.backup_id].created_at or 0, b.backup_id)).backup_id
    removed = removal_reasons(list(merged.values()), retention, now_ms=now_ms, protect=newest)
    for entry in pending:
        if entry.backup_id in removed:
            entry.outcome, entry.reason = LEFT_OUT, f"the destination's retention would remove it: {removed[entry.backup_id]}"


def _copy_under_lock(source: Storage, destination: Storage, entry: BackupCopy, workers: int, wait: float) -> None:
    with ChainLock(destination, f"rbak copy of {entry.backup_id}", wait=wait).held() as held:
        leased = LeasedStorage(destination, held)
        written: list[str] = []
        try:
            _copy_one(source, leased, entry, workers, written)
        except CopyRefusedError as exc:
            entry.outcome, entry.reason = REFUSED, str(exc)
            own = [key for key in written if key.startswith(f"{entry.backup_id}/")]
            for key in own:  # never a chain base's object: another backup at the destination may list it
                leased.delete(key)
            log.warning("not copying backup %s: %s (removed the %d objects this copy wrote in its folder)",
                        entry.backup_id, exc, len(own))


def _copy_one(source: Storage, destination: Storage, entry: BackupCopy, workers: int, written: list[str]) -> None:
    key = manifest_key(entry.backup_id)
    manifest_bytes = read_bounded(source, key, MAX_MANIFEST_BYTES, "a manifest")
    try:
        if read_bounded(destination, key, MAX_MANIFEST_BYTES, "a manifest") == manifest_bytes:
            entry.outcome, entry.reason = ALREADY_THERE, "its manifest is at the destination, byte for byte"
            return
        raise CopyRefusedError(f"the destination holds another manifest under {key}; not overwritten")
    except ObjectNotFoundError:
        pass
    manifest = BackupManifest.from_bytes(manifest_bytes, name=key)
    objects: list[tuple[str, SegmentMetadata | None]] = [(s.key, s) for q in manifest.queues for s in q.segments]
    if manifest.definitions is not None:
        objects.append((manifest.definitions.key, None))
    there = {info.key: info.size for info in destination.list(f"{entry.backup_id}/")}
    for owner in sorted({k.split("/", 1)[0] for k, _ in objects} - {entry.backup_id}):
        there.update({info.key: info.size for info in destination.list(f"{owner}/")})
    with ThreadPoolExecutor(max_workers=max(1, workers), thread_name_prefix="rbak-copy") as pool:
        # the pool's exit waits for every object, so `written` names all this copy wrote, refused or not
        stop = threading.Event()  # set by the first refusal: the objects still queued are not read
        futures = [pool.submit(_copy_object, source, destination, k, segment, there.get(k), written, stop)
                   for k, segment in objects]
    for future in futures:
        copied_bytes = future.result()  # the first refusal or fault, in listing order
        if copied_bytes is None:
            entry.objects_already_there += 1
        else:
            entry.objects_copied += 1
            entry.bytes_copied += copied_bytes
    checked = validate_backup(_WithManifest(destination, key, manifest_bytes), entry.backup_id, deep=True)
    if not checked.valid:
        raise CopyRefusedError("at the destination: " + "; ".join(str(d) for d in checked.defects[:5]))
    destination.put(key, manifest_bytes)  # last: only now is the copy complete at the destination
    entry.outcome = COPIED
    log.info("copied backup %s: %d objects (%d bytes), %d already there, verified at %s", entry.backup_id,
             entry.objects_copied, entry.bytes_copied, entry.objects_already_there, destination.url)


def _copy_object(source: Storage, destination: Storage, key: str, segment: SegmentMetadata | None,
                 size_there: int | None, written: list[str], stop: threading.Event) -> int | None:
    """Copy one object unless it is already there at its listed size; its byte count, or None when not written."""
    if stop.is_set():
        raise CopyRefusedError(f"{key}: not copied after an earlier refusal")
    try:
        return _copy_checked(source, destination, key, segment, size_there, written)
    except CopyRefusedError:
        stop.set()
        raise


def _copy_checked(source: Storage, destination: Storage, key: str, segment: SegmentMetadata | None,
                  size_there: int | None, written: list[str]) -> int | None:
    if segment is not None and size_there == segment.size_bytes:
        return None
    try:
        data = source.get(key)
    except ObjectNotFoundError:
        raise CopyRefusedError(f"{key}: missing at the source") from None
    except StorageError as exc:
        raise CopyRefusedError(f"{key}: cannot be read at the source ({exc})") from None
    if segment is not None:
        digest = hashlib.sha256(data).hexdigest()
        if len(data) != segment.size_bytes or digest != segment.checksum:
            raise CopyRefusedError(f"{key}: damaged at the source ({len(data)} bytes, SHA-256 {digest[:16]}…; the manifest "
                                   f"says {segment.size_bytes} bytes, {segment.checksum[:16]}…)")
    elif size_there == len(data):
        return None
    destination.put(key, data)
    written.append(key)
    return len(data)


class _WithManifest(Storage):
    """The destination as it will be once the manifest is written: reads only, the manifest served from memory."""

    def __init__(self, inner: Storage, key: str, manifest: bytes) -> None:
        self.inner, self.key, self.manifest, self.url = inner, key, manifest, inner.url

    def put(self, key: str, data: bytes) -> None:
        raise StorageError("validation does not write", key)

    def delete(self, key: str) -> None:
        raise StorageError("validation does not delete", key)

    def get(self, key: str) -> bytes:
        return self.manifest if key == self.key else self.inner.get(key)

    def get_range(self, key: str, offset: int, length: int) -> bytes:
        if key == self.key:
            return self.manifest[offset:offset + length]
        return self.inner.get_range(key, offset, length)

    def stat(self, key: str) -> ObjectInfo:
        return ObjectInfo(key, len(self.manifest)) if key == self.key else self.inner.stat(key)

    def list(self, prefix: str = "") -> Iterator[ObjectInfo]:
        return self.inner.list(prefix)

    def exists(self, key: str) -> bool:
        return key == self.key or self.inner.exists(key)
