"""Linking a backup's streams to the backups they continue (:func:`link_chains`), and the location-wide lock that
keeps that and retention apart (:class:`ChainLock`). What a chain declares in a manifest is :mod:`.chain`.

Retention decides from what the location holds and then deletes; a run picks
the base its streams continue from, and much later lists that base's
segments in its completed manifest. Either interleaved with the other could
delete what a chain lists. So both hold this one lock while they decide:
retention for its whole pass, a run while it picks a stream's base and while
it links its chains and writes its completed manifest. It is taken with the
same primitive as a backup's lock (:class:`~airflow_rbak.repository.lock.BackupLock`
on :data:`~airflow_rbak.codec.layout.CHAIN_LOCK_KEY`) and renewed while held.

Holders wait for each other (the critical sections are short beside a
backup). A holder that crashed leaves the lock behind; once its lease has not
been renewed for ``stale_after`` seconds the next caller takes it over.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator
from dataclasses import replace
from typing import Any

from airflow_rbak.codec import BackupManifest, QueueBackup
from airflow_rbak.codec.layout import CHAIN_LOCK_KEY
from airflow_rbak.display import package_logger
from airflow_rbak.exceptions import RbakError
from airflow_rbak.repository.catalog import list_backups
from airflow_rbak.repository.chain import CHAIN_BASE, ChainBaseMissingError, declare_dependencies
from airflow_rbak.repository.lock import DEFAULT_CONFIRM_AFTER, DEFAULT_RENEW_EVERY, BackupLock, BackupLockedError, LockInfo
from airflow_rbak.repository.manifest_store import ManifestStore
from airflow_rbak.storage.base import ObjectNotFoundError, Storage

log = package_logger(__name__)
#: Seconds a caller waits for the chain lock before it gives up.
DEFAULT_WAIT = 900.0
#: Seconds without a renewal after which a holder is taken for crashed (ten missed renewals).
DEFAULT_STALE_AFTER = 10 * DEFAULT_RENEW_EVERY


class ChainLock:
    """Hold the location's chain lock for one critical section (see the module docstring)."""

    def __init__(self, storage: Storage, owner: str, *, wait: float = DEFAULT_WAIT, poll: float = 1.0,
                 stale_after: float = DEFAULT_STALE_AFTER, confirm_after: float = DEFAULT_CONFIRM_AFTER,
                 clock: Callable[[], float] = time.time) -> None:
        self.lock = BackupLock(storage, "the location's stream chains", owner, confirm_after=confirm_after,
                               key=CHAIN_LOCK_KEY)
        self.wait = wait
        self.poll = poll
        self.stale_after = stale_after
        self._clock = clock

    @contextlib.contextmanager
    def held(self) -> Iterator[BackupLock]:
        """Take the lock (waiting for a live holder), renew it while the block runs, give it back after."""
        self._acquire()
        try:
            with self.lock.renewing():
                yield self.lock
        finally:
            try:
                self.lock.release()
            except RbakError as exc:  # it goes stale and is taken over; the block's own outcome matters more
                log.warning("could not give back the chain lock %s (%s)", CHAIN_LOCK_KEY, exc)

    def _stale(self, held: LockInfo) -> bool:
        quiet_ms = self._clock() * 1000 - (held.renewed_at or held.acquired_at)
        return held.unreadable or quiet_ms > self.stale_after * 1000

    def _acquire(self) -> None:
        deadline = time.monotonic() + self.wait
        while True:
            try:
                self.lock.acquire(break_if=self._stale)
                return
            except BackupLockedError:
                if time.monotonic() >= deadline:
                    held = self.lock.read()
                    raise BackupLockedError(
                        f"{self.lock.storage.url}: waited {self.wait:.0f} s for the chain lock {CHAIN_LOCK_KEY} (held by "
                        f"{held.describe() if held else 'nobody now'}), which retention and runs linking stream chains "
                        "take in turn; try again later") from None
            time.sleep(self.poll)  # a live holder's section is short: look again soon


def _stream_offsets(entry: QueueBackup | None) -> dict[str, Any]:
    offsets = entry.extensions.get("stream_offsets") if entry is not None else None
    return offsets if isinstance(offsets, dict) else {}


def find_base(storage: Storage, backup_id: str, entry: QueueBackup) -> tuple[BackupManifest, QueueBackup] | None:
    """The complete backup a stream capture continued from and its entry of the stream, or None when it starts a new
    chain.

    A capture that continued starts right after the base's last offset (``first == last + 1``; the
    capture checked that the stream still holds the base's last message). A capture from offset 0
    starts a new chain. When several backups ended at that offset (nothing arrived in between),
    the newest is the base: its segment list is the longest. No such backup is an error: the stream
    was taken from the middle, and without its base this backup would silently miss the beginning.
    """
    first = _stream_offsets(entry).get("first")
    if entry.queue_type != "stream" or not isinstance(first, int) or first <= 0:
        return None
    counted, uncounted = _candidates_newest_first(storage, backup_id)
    for manifest in counted:
        base = manifest.queue(entry.vhost, entry.name)
        if base is not None and base.queue_type == "stream" and _stream_offsets(base).get("last") == first - 1:
            return manifest, base
    why = next((f"; backup {m.backup_id!r} ends there but does not count: {problem}" for m, problem in uncounted
                if _stream_offsets(m.queue(entry.vhost, entry.name)).get("last") == first - 1),
               " (it was removed meanwhile)")
    raise ChainBaseMissingError(
        f"backup {backup_id!r} took stream {entry.name!r} of vhost {entry.vhost!r} from offset {first}, after a previous "
        f"backup, but no complete backup in {storage.url} ends at offset {first - 1}{why}; run the backup again under "
        "a new backup_id, or with full streams")


def _candidates_newest_first(storage: Storage, exclude: str) -> tuple[list[BackupManifest], list[tuple[BackupManifest, str]]]:
    """The backups that count (the catalog's ``complete``: only those may be a chain's base), newest first; and those
    whose manifest reads but that do not count (future, rebuilt, damaged), with why, to say so when no base is found."""
    store = ManifestStore(storage)
    counted: list[BackupManifest] = []
    uncounted: list[tuple[BackupManifest, str]] = []
    for summary in list_backups(storage):
        if summary.backup_id == exclude or summary.status in ("no-manifest", "retired", "incomplete"):
            continue
        try:
            manifest = store.load(summary.backup_id)
        except RbakError:  # unreadable, or removed since it was listed: not a base to continue from
            continue
        if summary.status == "complete":
            counted.append(manifest)
        else:
            uncounted.append((manifest, summary.problem or summary.status))
    counted.sort(key=lambda m: (m.created_at, m.backup_id), reverse=True)
    uncounted.sort(key=lambda pair: (pair[0].created_at, pair[0].backup_id), reverse=True)
    return counted, uncounted


def latest_with_stream(storage: Storage, backup_id: str, vhost: str, name: str) -> BackupManifest | None:
    """The newest complete backup (other than ``backup_id``) that holds stream ``vhost/name``: where the next one continues."""
    for manifest in _candidates_newest_first(storage, backup_id)[0]:
        entry = manifest.queue(vhost, name)
        if entry is not None and entry.queue_type == "stream":
            return manifest
    return None


def link_stream_chain(storage: Storage, backup_id: str, entry: QueueBackup) -> str | None:
    """Prefix a stream entry's own segments with its base's (renumbered after them); return the base's id.

    Every inherited segment must still be present: a chain with a hole would restore with a gap.
    """
    found = find_base(storage, backup_id, entry)
    if found is None:
        entry.extensions[CHAIN_BASE] = None
        return None
    base_manifest, base = found
    inherited = sorted(base.segments, key=lambda s: s.sequence)
    for segment in inherited:
        try:
            storage.stat(segment.key)
        except ObjectNotFoundError:
            raise ChainBaseMissingError(
                f"stream {entry.name!r} of vhost {entry.vhost!r} continues backup {base_manifest.backup_id!r}, but its "
                f"segment {segment.key} is missing; run the backup again under a new backup_id with full streams") from None
    own = sorted(entry.segments, key=lambda s: s.sequence)
    entry.segments = [replace(s, extensions=dict(s.extensions)) for s in inherited]
    entry.segments += [replace(s, sequence=len(inherited) + i) for i, s in enumerate(own, start=1)]
    entry.extensions[CHAIN_BASE] = base_manifest.backup_id
    return base_manifest.backup_id


def link_chains(storage: Storage, manifest: BackupManifest) -> tuple[str, ...]:
    """Link every stream entry of a manifest being completed to its base and declare the result."""
    for entry in manifest.queues:
        if entry.queue_type == "stream":
            base = link_stream_chain(storage, manifest.backup_id, entry)
            if base is not None:
                log.info("stream %s/%s of backup %s continues backup %s: %d segments in its chain", entry.vhost,
                         entry.name, manifest.backup_id, base, len(entry.segments))
    return declare_dependencies(manifest)
