"""Which storage objects belong to a backup: the one place that decides it.

A manifest is data a reader did not write: edited, copied between backups,
or damaged, it can name another backup's segment or definitions, and a
restore would publish what belongs to someone else. So restore, validate and
rebuild read only the objects this module accepts for the manifest:

* a segment of queue *Q* at sequence *n* is the layout's key for *Q* and *n*
  under ``{backup_id}/`` (or its interim compaction copy, which a manifest
  saved mid-compaction names: the same sequence of the same queue, same bytes);
* the definitions export is ``{backup_id}/definitions/definitions.json[.ext]``.

A backup that later declares a base backup (stream chains) extends
:func:`owner_prefixes`; every reader follows.
"""

from __future__ import annotations

from airflow_rbak.codec import BackupManifest, QueueBackup, SegmentMetadata
from airflow_rbak.codec.layout import (
    check_backup_id,
    compression_from_key,
    definitions_key,
    interim_segment_key,
    segment_key,
)
from airflow_rbak.exceptions import ConfigurationError


def owner_prefixes(manifest: BackupManifest) -> tuple[str, ...]:
    """The backup ids whose objects this manifest may read: its own (a declared base would be added here)."""
    return (manifest.backup_id,)


def segment_defect(manifest: BackupManifest, queue: QueueBackup, segment: SegmentMetadata) -> str | None:
    """Why ``segment`` is not an object of this backup's queue, or None when it is."""
    for owner in owner_prefixes(manifest):
        try:
            expected = segment_key(check_backup_id(owner), queue.vhost, queue.name, segment.sequence,
                                   compression_from_key(segment.key))
        except ConfigurationError:
            return f"sequence {segment.sequence} or backup id {owner!r} cannot name a segment"
        if segment.key in (expected, interim_segment_key(expected)):
            return None
    return (f"not an object of backup {manifest.backup_id!r}: queue {queue.vhost!r}/{queue.name!r} sequence "
            f"{segment.sequence} is stored at {expected}")


def definitions_defect(manifest: BackupManifest) -> str | None:
    """Why the manifest's definitions key is not this backup's export, or None when it is (or there is none)."""
    if manifest.definitions is None:
        return None
    key = manifest.definitions.key
    for owner in owner_prefixes(manifest):
        try:
            expected = definitions_key(check_backup_id(owner), compression_from_key(key))
        except ConfigurationError:
            return f"backup id {owner!r} cannot name a definitions export"
        if key == expected:
            return None
    return f"not an object of backup {manifest.backup_id!r}: its definitions export is stored at {expected}"


def foreign_objects(manifest: BackupManifest) -> list[tuple[str, str]]:
    """Every (key, reason) the manifest names that is not this backup's own object, in manifest order."""
    found = [(s.key, reason) for q in manifest.queues for s in q.segments
             if (reason := segment_defect(manifest, q, s)) is not None]
    if (reason := definitions_defect(manifest)) is not None:
        found.append((manifest.definitions.key, reason))
    return found


def is_interim_copy(key: str) -> bool:
    """True for a compaction's interim segment key (``segment-0NNNN``: one more leading zero than the layout writes)."""
    name = key.rsplit("/", 1)[-1]
    if not name.startswith("segment-0"):
        return False
    digits = name[len("segment-"):].split(".", 1)[0]
    return digits.isdigit() and len(digits) > 4 and digits.startswith("0")
