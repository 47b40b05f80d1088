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

from airflow_rbak.codec import BackupManifest, QueueBackup
from airflow_rbak.codec.errors import ManifestError
from airflow_rbak.codec.layout import check_backup_id, compression_from_key, segment_key
from airflow_rbak.display import package_logger
from airflow_rbak.exceptions import RbakError
from airflow_rbak.repository.manifest_store import ManifestStore
from airflow_rbak.storage.base import Storage

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


def declare_dependencies(manifest: BackupManifest) -> tuple[str, ...]:
    """Set ``depends_on`` to every other backup whose segments the manifest lists, in chain order."""
    owners: list[str] = []
    for queue in manifest.queues:
        for owner in chain_owners(queue):
            if owner != manifest.backup_id and owner not in owners:
                owners.append(owner)
    manifest.extensions[DEPENDS_ON] = owners
    return tuple(owners)


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
