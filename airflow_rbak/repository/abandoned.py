"""Removing abandoned backups: the folders (staging included) of incomplete backups whose run is gone (no Airflow).

A run that crashes leaves its folder behind: an incomplete manifest, its staging, its checkpoints, perhaps some
segments, and its lock. Retention never removes an incomplete backup, so without this the folder stays for ever,
and while its lock stands every complete backup holding a stream is kept for it. The catalog calls such a backup
*abandoned* only on evidence that its run is gone (:func:`~airflow_rbak.repository.catalog.abandonment`: a lock
not renewed for the grace period, ``[rbak] abandoned_grace_hours``). What is removed, and what never is:

- the decision is made again from the lock as read just before acting, and the lock is then *taken over* from
  exactly that holder (:meth:`BackupLock.take_over`): a run that renewed its lease or took the lock in between
  keeps its backup, and a run that comes back afterwards is refused at its next write;
- every delete goes through that lock (:class:`LeasedStorage`); segments go first, the manifest next and the lock
  last, so a pass stopped half-way leaves a folder that is still abandoned, and the next pass finishes it;
- no object any readable manifest of another backup lists is removed (a chain may list segments in another
  folder); when some manifest cannot be read, no segment of an abandoned folder is removed at all;
- errors are collected per backup: one folder that cannot be removed never stops the others.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field
from typing import Any

from airflow_rbak.codec.layout import manifest_key, segment_file
from airflow_rbak.display import package_logger
from airflow_rbak.exceptions import RbakError
from airflow_rbak.repository.catalog import DEFAULT_ABANDONED_AFTER_MS, BackupSummary, abandonment, list_backups
from airflow_rbak.repository.chain import referenced_keys
from airflow_rbak.repository.chain_link import ChainLock
from airflow_rbak.repository.lock import BackupLock, LeasedStorage
from airflow_rbak.repository.manifest_store import ManifestStore
from airflow_rbak.storage.base import Storage

log = package_logger(__name__)
#: Who a cleanup's lock names while it removes a folder.
CLEANUP_OWNER = "rbak: removing an abandoned backup"


@dataclass
class AbandonedResult:
    """What one pass did: the abandoned backups removed, the objects kept for others, and what it left and why."""

    removed: list[str] = field(default_factory=list)
    objects_deleted: int = 0
    #: Objects of a removed folder kept because another backup's manifest lists them (or may: one is unreadable).
    objects_kept: dict[str, int] = field(default_factory=dict)
    #: Abandoned backups left as they are, with why (their run came back, ...).
    skipped: dict[str, str] = field(default_factory=dict)
    #: Backups whose removal failed, with the error; the others were still removed.
    errors: dict[str, str] = field(default_factory=dict)
    dry_run: bool = False

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def remove_abandoned(storage: Storage, *, now_ms: int | None = None, after_ms: int = DEFAULT_ABANDONED_AFTER_MS,
                     dry_run: bool = False, chain_lock: ChainLock | None = None) -> AbandonedResult:
    """Remove every abandoned backup of ``storage`` (see the module docstring); ``dry_run`` says what would go.

    The pass holds the location's chain lock (``chain_lock``, or its own) while it decides and deletes, as a
    retention pass does, so no chain is linked while objects go; a location with nothing abandoned takes no lock.
    """
    now_ms = int(time.time() * 1000) if now_ms is None else now_ms
    if dry_run or not any(b.status == "abandoned" for b in list_backups(storage, now_ms=now_ms, abandoned_after_ms=after_ms)):
        return _remove(storage, now_ms, after_ms, dry_run)
    with (chain_lock or ChainLock(storage, "removing abandoned backups")).held():
        return _remove(storage, now_ms, after_ms, dry_run)


def _remove(storage: Storage, now_ms: int, after_ms: int, dry_run: bool) -> AbandonedResult:
    result = AbandonedResult(dry_run=dry_run)
    backups = list_backups(storage, now_ms=now_ms, abandoned_after_ms=after_ms)
    abandoned = [b for b in backups if b.status == "abandoned"]
    if not abandoned:
        return result
    listed, all_readable = _listed_by_others(storage, backups)
    for backup in abandoned:
        try:
            _remove_one(storage, backup, listed, all_readable, now_ms, after_ms, result)
        except RbakError as exc:
            log.warning("could not remove abandoned backup %s (%s); the others are removed", backup.backup_id, exc)
            result.errors[backup.backup_id] = str(exc)
    return result


def _listed_by_others(storage: Storage, backups: list[BackupSummary]) -> tuple[set[str], bool]:
    """The keys every readable manifest of a backup that is not abandoned lists; and whether every manifest read."""
    store, manifests, all_readable = ManifestStore(storage), [], True
    for backup in backups:
        if backup.status in ("abandoned", "no-manifest", "retired"):
            continue
        try:
            manifests.append(store.load(backup.backup_id))
        except RbakError as exc:
            log.warning("cannot read the manifest of backup %s (%s): no segment of an abandoned backup is removed",
                        backup.backup_id, exc)
            all_readable = False
    keys = set(referenced_keys(manifests))
    keys |= {m.definitions.key for m in manifests if m.definitions is not None}
    return keys, all_readable


def _remove_one(storage: Storage, backup: BackupSummary, listed: set[str], all_readable: bool, now_ms: int,
                after_ms: int, result: AbandonedResult) -> None:
    backup_id = backup.backup_id
    lock = BackupLock(storage, backup_id, CLEANUP_OWNER)
    held = lock.read()
    keys = [info.key for info in storage.list(f"{backup_id}/") if info.key != lock.key]
    kept = {k for k in keys if k in listed or (not all_readable and segment_file(k) and k.startswith(f"{backup_id}/queues/"))}
    segments = any(segment_file(k) and k.startswith(f"{backup_id}/queues/") for k in keys)
    if not abandonment(held, backup.created_at is not None, backup.created_at, segments, now_ms=now_ms, after_ms=after_ms):
        result.skipped[backup_id] = "its lock changed since it was listed: its run may be back"
        return
    doomed = [k for k in keys if k not in kept]
    if result.dry_run:
        result.removed.append(backup_id)
        result.objects_deleted += len(doomed) + (held is not None)
        _note_kept(result, backup_id, kept, "would remove")
        return
    if not lock.take_over(held):
        result.skipped[backup_id] = "its lock changed before it could be taken over: its run may be back"
        return
    leased, manifest = LeasedStorage(storage, lock), manifest_key(backup_id)
    for key in sorted(doomed, key=lambda k: k == manifest):  # the manifest after everything but the lock
        leased.delete(key)  # on a failure this pass's lock stays, lapses, and the folder is abandoned again
        result.objects_deleted += 1
    result.objects_deleted += lock.release()
    result.removed.append(backup_id)
    _note_kept(result, backup_id, kept, "removes")


def _note_kept(result: AbandonedResult, backup_id: str, kept: set[str], verb: str) -> None:
    if kept:
        result.objects_kept[backup_id] = len(kept)
    log.info("%s abandoned backup %s%s", verb, backup_id,
             f", keeping {len(kept)} objects other backups list (or may)" if kept else " entirely")
