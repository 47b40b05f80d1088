"""Stream chains: which earlier backups' segments a backup lists, and declaring that in its manifest.

An incremental stream backup captures only what arrived since the previous
complete backup of that stream. To make every complete backup restorable on
its own, its queue entry for the stream lists the segments of the backup it
continued from (which already list *their* bases' segments) followed by its
own: the segments are shared, never copied, as Cumulus and restic share
data between snapshots. A foreign RBAK v1 reader that follows the
manifest's ``key`` and ``sequence`` fields reads the whole stream.

Two fields declare the chain, after the schema's fields (foreign readers
ignore them):

- ``depends_on`` (manifest): the ids of every backup whose objects the
  manifest lists, oldest first. Storage keys under any other backup's folder
  are a defect (:func:`undeclared_owners`); issue 14's key check allows
  exactly ``{backup_id} ∪ depends_on`` (:func:`allowed_owners`).
- ``chain_base`` (stream queue entry): the backup this stream continued from,
  ``null`` when the stream starts a new chain (first backup, full mode, a
  re-created or truncated stream).

Within a queue the segments of each backup appear as one run, in chain order,
numbered in their owner's folder from 1 (``segment-0001`` …), while
``sequence`` runs 1..N over the whole chain (:func:`expected_keys`).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import replace
from typing import Any

from airflow_rbak.codec import BackupManifest, QueueBackup
from airflow_rbak.codec.errors import ManifestError
from airflow_rbak.codec.layout import check_backup_id, compression_from_key, segment_key
from airflow_rbak.display import package_logger
from airflow_rbak.exceptions import RbakError
from airflow_rbak.repository.manifest_store import ManifestStore
from airflow_rbak.storage.base import ObjectNotFoundError, Storage

log = package_logger(__name__)

DEPENDS_ON = "depends_on"
CHAIN_BASE = "chain_base"


class ChainBaseMissingError(RbakError):
    """A stream was captured as a continuation of a backup whose manifest or segments are gone."""


def segment_owner(key: str) -> str:
    """The backup whose folder holds ``key`` (its first path component)."""
    return key.split("/", 1)[0]


def dependencies(manifest: BackupManifest) -> tuple[str, ...]:
    """The backups ``manifest`` declares it depends on (``depends_on``), oldest first; () for none.

    The one answer to "which other backups does this backup need": retention keeps what they hold,
    restore and validation accept their keys. A malformed declaration is a :class:`ManifestError`.
    """
    value = manifest.extensions.get(DEPENDS_ON)
    if value is None:
        return ()
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise ManifestError(f"manifest.{DEPENDS_ON} must be an array of backup ids", segment="manifest.json")
    for backup_id in value:
        check_backup_id(backup_id)
    return tuple(value)


def allowed_owners(manifest: BackupManifest) -> frozenset[str]:
    """The backup folders whose objects ``manifest`` may list: its own and its declared bases'."""
    return frozenset((manifest.backup_id, *dependencies(manifest)))


def undeclared_owners(manifest: BackupManifest) -> list[str]:
    """Folders the manifest's segment keys point into without a declaration (a defect), sorted."""
    allowed = allowed_owners(manifest)
    return sorted({segment_owner(s.key) for q in manifest.queues for s in q.segments} - allowed)


def chain_owners(queue: QueueBackup) -> list[str]:
    """The backups a queue's segments come from, in chain order (each once)."""
    owners: list[str] = []
    for segment in sorted(queue.segments, key=lambda s: s.sequence):
        owner = segment_owner(segment.key)
        if owner not in owners:
            owners.append(owner)
    return owners


def expected_keys(backup_id: str, queue: QueueBackup) -> list[str | None]:
    """The key the layout gives each segment (in sequence order): numbered from 1 within its owner's folder.

    ``None`` where no key can be derived (a sequence or name the layout refuses). For a queue
    without a chain this is ``{backup_id}/queues/{vhost}/{queue}/segment-{sequence}``.
    """
    counts: dict[str, int] = {}
    keys: list[str | None] = []
    for segment in sorted(queue.segments, key=lambda s: s.sequence):
        owner = segment_owner(segment.key)
        owner = owner if owner != backup_id and owner else backup_id
        counts[owner] = counts.get(owner, 0) + 1
        try:
            keys.append(segment_key(owner, queue.vhost, queue.name, counts[owner], compression_from_key(segment.key)))
        except ValueError:
            keys.append(None)
    return keys


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
    from airflow_rbak.repository.catalog import list_backups  # the catalog judges what counts, and reads chains here

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


def declare_dependencies(manifest: BackupManifest) -> tuple[str, ...]:
    """Set ``depends_on`` to every other backup whose segments the manifest lists, in chain order."""
    owners: list[str] = []
    for queue in manifest.queues:
        for owner in chain_owners(queue):
            if owner != manifest.backup_id and owner not in owners:
                owners.append(owner)
    manifest.extensions[DEPENDS_ON] = owners
    return tuple(owners)


def link_chains(storage: Storage, manifest: BackupManifest) -> tuple[str, ...]:
    """Link every stream entry of a manifest being completed to its base and declare the result."""
    for entry in manifest.queues:
        if entry.queue_type == "stream":
            base = link_stream_chain(storage, manifest.backup_id, entry)
            if base is not None:
                log.info("stream %s/%s of backup %s continues backup %s: %d segments in its chain", entry.vhost,
                         entry.name, manifest.backup_id, base, len(entry.segments))
    return declare_dependencies(manifest)


def referenced_keys(manifests: Iterable[BackupManifest]) -> dict[str, set[str]]:
    """Each segment key the manifests list, with the ids of the backups that list it."""
    needed: dict[str, set[str]] = {}
    for manifest in manifests:
        for queue in manifest.queues:
            for segment in queue.segments:
                needed.setdefault(segment.key, set()).add(manifest.backup_id)
    return needed


def shared_queues(storage: Storage, manifest: BackupManifest) -> set[tuple[str, str]]:
    """Queues of ``manifest`` whose segments another backup lists, or that list another backup's segments.

    Rewriting such a queue's segments (compaction) would break a chain: their keys and checksums are
    recorded in more than one manifest.
    """
    store = ManifestStore(storage)
    others = []
    for backup_id in store.backup_ids():
        if backup_id != manifest.backup_id:
            try:
                others.append(store.load(backup_id))
            except RbakError:
                continue
    listed_elsewhere = set(referenced_keys(others))
    return {(q.vhost, q.name) for q in manifest.queues
            if any(s.key in listed_elsewhere or segment_owner(s.key) != manifest.backup_id for s in q.segments)}


def missing_bases(manifest: BackupManifest, missing_keys: set[str]) -> dict[str, tuple[int, int]]:
    """Each declared base with segments among ``missing_keys``: (segments gone, segments listed from it).

    Validation and the Spark verify job report these as "missing base backup" defects.
    """
    found: dict[str, tuple[int, int]] = {}
    for base in dependencies(manifest):
        listed = [s.key for q in manifest.queues for s in q.segments if segment_owner(s.key) == base]
        gone = sum(1 for key in listed if key in missing_keys)
        if gone:
            found[base] = (gone, len(listed))
    return found


def missing_base_reason(base: str, gone: int, listed: int) -> str:
    """The one wording of a missing-base defect."""
    return (f"missing base backup {base!r}: {gone} of the {listed} segments this backup takes from it are gone; "
            "a restore would miss the start of its streams")
