"""A second copy: complete, verified backups copied to another location, whole chains, manifest last (no Airflow here).

restic's ``copy`` and pgBackRest's repositories are the model: the destination is a location of its own, as
``rbak list``, ``rbak_verify``, ``rbak_restore`` and ``rbak_freshness`` read any location, with its own retention.

- **What goes.** A backup that is ``complete`` at the source (:mod:`airflow_rbak.repository.catalog`): every
  object its manifest lists (its segments, the segments of the backups its stream chains continue, its
  definitions) and then the manifest itself, byte for byte. A chain base that is complete at the source and
  not at the destination is copied too, before the backup that continues it.
- **Never changes what it did not write** (:mod:`airflow_rbak.repository.copy_objects`). Only the objects the
  backup's manifest may own are copied, each checked against the SHA-256 and size the manifest records before it
  is written (a damaged source backup is refused, named with the object and reason); an object already at the
  destination is read and kept only when its SHA-256 is the one wanted, else the backup is refused before
  anything is written, naming the key and both digests; absent objects are created with ``put_if_absent``; a
  refused copy removes exactly the objects it created. The others proceed.
- **Checked twice.** When every object is in place the backup is validated *at the destination* as ``rbak
  validate --deep`` would, with the manifest not yet there, and only then is the manifest written (never over
  another): a half copy never looks complete, to a reader or to this module.
- **Idempotent, resumable.** A backup whose manifest is at the destination with the same bytes is skipped
  without reading anything else. An object already at the destination with the wanted SHA-256 is not written
  again (an interrupted copy resumes where it stopped).
- **Encrypted locations.** Each side is opened with its own keys and identity: what is read from the source is
  authenticated there, and what is written is sealed for the destination (``storage/encrypted.py``).
- **Under the destination's chain lock.** Each backup is written while the destination's chain lock is held
  (:mod:`airflow_rbak.repository.chain_link`), and so is the destination's retention, so neither ever sees the
  other's half-done work. The source is only read (its credentials may be read-only).
- **The destination's retention.** With a policy, a backup that policy would remove at once is not copied, and
  after the copies the policy is applied at the destination (never removing the newest backup copied).

The copy runs in the process that calls it, a few objects at a time (``workers``): its cost is moving bytes.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from airflow_rbak.codec import BackupManifest, CodecError
from airflow_rbak.codec.layout import check_backup_id, manifest_key
from airflow_rbak.codec.manifest import MAX_MANIFEST_BYTES
from airflow_rbak.display import package_logger
from airflow_rbak.repository.catalog import LATEST, BackupSummary, list_backups
from airflow_rbak.repository.chain_link import ChainLock
from airflow_rbak.repository.copy_objects import (
    CopiedObjects,
    CopyRefusedError,
    copy_wanted,
    remove_created,
    wanted_objects,
)
from airflow_rbak.repository.lock import LeasedStorage
from airflow_rbak.repository.retention import RetentionPolicy, apply_retention, removal_reasons
from airflow_rbak.repository.validate import validate_backup
from airflow_rbak.storage.base import ObjectInfo, ObjectNotFoundError, Storage, StorageError, read_bounded
from airflow_rbak.storage.forwarding import ForwardingStorage

log = package_logger(__name__)

COPIED, ALREADY_THERE, REFUSED, LEFT_OUT = "copied", "already there", "refused", "left out"


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
        done = CopiedObjects()
        try:
            _copy_one(source, leased, entry, workers, done)
        except CopyRefusedError as exc:
            entry.outcome, entry.reason = REFUSED, str(exc)
            removed = remove_created(leased, done.created)  # only what this copy created: never what it found there
            entry.objects_copied, entry.bytes_copied = 0, 0
            log.warning("not copying backup %s: %s (removed the %d objects this copy had created)",
                        entry.backup_id, exc, removed)


def _copy_one(source: Storage, destination: Storage, entry: BackupCopy, workers: int, done: CopiedObjects) -> None:
    key = manifest_key(entry.backup_id)
    manifest_bytes = read_bounded(source, key, MAX_MANIFEST_BYTES, "a manifest")
    try:
        if read_bounded(destination, key, MAX_MANIFEST_BYTES, "a manifest") == manifest_bytes:
            entry.outcome, entry.reason = ALREADY_THERE, "its manifest is at the destination, byte for byte"
            return
        raise CopyRefusedError(f"the destination holds another manifest under {key}; not overwritten")
    except ObjectNotFoundError:
        pass
    try:
        manifest = BackupManifest.from_bytes(manifest_bytes, name=key)
    except CodecError as exc:
        raise CopyRefusedError(f"{key}: {exc}") from None
    wanted = wanted_objects(source, manifest, entry.backup_id)
    present: set[str] = set()
    for owner in sorted({w.key.split("/", 1)[0] for w in wanted} | {entry.backup_id}):
        present.update(info.key for info in destination.list(f"{owner}/"))
    try:
        copy_wanted(source, destination, wanted, present, done, workers)
    finally:
        entry.objects_copied, entry.bytes_copied = len(done.created), done.bytes_created
        entry.objects_already_there = done.already_there
    checked = validate_backup(_WithManifest(destination, key, manifest_bytes), entry.backup_id, deep=True)
    if not checked.valid:
        raise CopyRefusedError("at the destination: " + "; ".join(str(d) for d in checked.defects[:5]))
    if not destination.put_if_absent(key, manifest_bytes):  # last: only now is the copy complete at the destination
        if read_bounded(destination, key, MAX_MANIFEST_BYTES, "a manifest") != manifest_bytes:
            raise CopyRefusedError(f"another manifest appeared under {key} at the destination; not overwritten")
    entry.outcome = COPIED
    log.info("copied backup %s: %d objects (%d bytes), %d already there, verified at %s", entry.backup_id,
             entry.objects_copied, entry.bytes_copied, entry.objects_already_there, destination.url)


class _WithManifest(ForwardingStorage):
    """The destination as it will be once the manifest is written: reads only, the manifest served from memory."""

    def __init__(self, inner: Storage, key: str, manifest: bytes) -> None:
        super().__init__(inner)
        self.key, self.manifest = key, manifest

    def put(self, key: str, data: bytes) -> None:
        raise StorageError("validation does not write", key)

    def put_if_absent(self, key: str, data: bytes) -> bool:
        raise StorageError("validation does not write", key)

    def put_file(self, key: str, path: str | os.PathLike[str]) -> None:
        raise StorageError("validation does not write", key)

    def replace_if_unchanged(self, key: str, data: bytes, tag: str) -> bool:
        raise StorageError("validation does not write", key)

    def delete(self, key: str) -> None:
        raise StorageError("validation does not delete", key)

    def delete_if_unchanged(self, key: str, tag: str) -> bool:
        raise StorageError("validation does not delete", key)

    def purge(self, key: str) -> bool:
        raise StorageError("validation does not delete", key)

    def get(self, key: str) -> bytes:
        """The manifest from memory, any other object from the destination."""
        return self.manifest if key == self.key else self.inner.get(key)

    def get_range(self, key: str, offset: int, length: int) -> bytes:
        """A range of the manifest from memory, or of another object from the destination."""
        if key == self.key:
            return self.manifest[offset:offset + length]
        return self.inner.get_range(key, offset, length)

    def get_file(self, key: str, path: str | os.PathLike[str]) -> None:
        """Not needed by validation: read through :meth:`get`, so the manifest is the one in memory."""
        Storage.get_file(self, key, path)

    def read_tagged(self, key: str) -> tuple[bytes, str]:
        """Read through :meth:`get`, so the manifest is the one in memory."""
        return Storage.read_tagged(self, key)

    def stat(self, key: str) -> ObjectInfo:
        """The manifest's size from memory, any other object's from the destination."""
        return ObjectInfo(key, len(self.manifest)) if key == self.key else self.inner.stat(key)
