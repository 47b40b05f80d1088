"""Which storage objects belong to a backup: the one place that decides it.

A manifest is data a reader did not write: edited, copied between backups,
or damaged, it can name another backup's segment or definitions, and a
restore would publish what belongs to someone else. So restore, validate and
rebuild read only the objects this module accepts for the manifest:

* a segment of queue *Q* is the layout's key for *Q* under ``{backup_id}/``
  or under a base backup the manifest declares in ``depends_on`` (stream
  chains, :mod:`airflow_rbak.backup.chain`), numbered in that folder (or its
  interim compaction copy, which a manifest saved mid-compaction names: the
  same segment, same bytes);
* the definitions export is ``{backup_id}/definitions/definitions.json[.ext]``.
"""

from __future__ import annotations

from dataclasses import replace

from airflow_rbak.backup import chain
from airflow_rbak.codec import BackupManifest, CodecError, QueueBackup
from airflow_rbak.codec.layout import check_backup_id, compression_from_key, definitions_key, interim_segment_key
from airflow_rbak.exceptions import ConfigurationError


def owner_prefixes(manifest: BackupManifest) -> frozenset[str]:
    """The backup ids whose objects this manifest may read: its own and the bases it declares (stream chains).

    A malformed ``depends_on`` declares nothing here (validate names it), so every other folder stays foreign.
    """
    try:
        return chain.allowed_owners(manifest)
    except CodecError:
        return frozenset({manifest.backup_id})


def queue_defects(manifest: BackupManifest, queue: QueueBackup) -> dict[str, str]:
    """Each segment key of ``queue`` that is not an object of this backup (or a declared base), with why.

    A chain's segments are numbered in their owner's folder from 1 while ``sequence`` runs over the whole
    chain (:func:`airflow_rbak.backup.chain.expected_keys`).
    """
    allowed, defects = owner_prefixes(manifest), {}
    for segment in queue.segments:
        if (owner := chain.segment_owner(segment.key)) not in allowed:
            defects[segment.key] = (f"not an object of backup {manifest.backup_id!r}: it lies in the folder of backup "
                                    f"{owner!r}, which its depends_on does not declare")
    # The rest must sit where the layout puts them. A foreign key is numbered as if it were this backup's own,
    # so that it does not shift its neighbours' numbering.
    own = replace(queue, segments=[s if s.key not in defects else replace(s, key=f"{manifest.backup_id}/{s.key}")
                                   for s in queue.segments])
    ordered = sorted(zip(own.segments, queue.segments), key=lambda pair: pair[0].sequence)
    for (_, segment), expected in zip(ordered, chain.expected_keys(manifest.backup_id, own)):
        if segment.key in defects:
            continue
        if expected is None or segment.key not in (expected, interim_segment_key(expected)):
            defects[segment.key] = (f"not an object of backup {manifest.backup_id!r}: queue {queue.vhost!r}/"
                                    f"{queue.name!r} sequence {segment.sequence} is stored at {expected}")
    return defects


def definitions_defect(manifest: BackupManifest) -> str | None:
    """Why the manifest's definitions key is not this backup's export, or None when it is (or there is none)."""
    if manifest.definitions is None:
        return None
    key = manifest.definitions.key
    try:
        expected = definitions_key(check_backup_id(manifest.backup_id), compression_from_key(key))
    except ConfigurationError:
        return f"backup id {manifest.backup_id!r} cannot name a definitions export"
    if key == expected:
        return None
    return f"not an object of backup {manifest.backup_id!r}: its definitions export is stored at {expected}"


def foreign_objects(manifest: BackupManifest) -> list[tuple[str, str]]:
    """Every (key, reason) the manifest names that is not this backup's own object, in manifest order."""
    found = [pair for q in manifest.queues for pair in queue_defects(manifest, q).items()]
    if manifest.definitions is not None and (reason := definitions_defect(manifest)) is not None:
        found.append((manifest.definitions.key, reason))
    return found


def is_interim_copy(key: str) -> bool:
    """True for a compaction's interim segment key (``segment-0NNNN``: one more leading zero than the layout writes)."""
    name = key.rsplit("/", 1)[-1]
    if not name.startswith("segment-0"):
        return False
    digits = name[len("segment-"):].split(".", 1)[0]
    return digits.isdigit() and len(digits) > 4 and digits.startswith("0")
