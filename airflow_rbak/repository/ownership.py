"""Which storage objects belong to a backup: the one place that decides it.

A manifest is data a reader did not write: edited, copied between backups,
or damaged, it can name another backup's segment or definitions, and a
restore would publish what belongs to someone else. So restore, validate and
rebuild read only the objects this module accepts for the manifest: a key
the manifest lists that stays inside ``{backup_id}/``, or inside the folder
of a base backup the manifest declares in ``depends_on`` (stream chains,
:mod:`airflow_rbak.repository.chain`).

The key is taken as the manifest gives it, never rebuilt from the queue's
names: another writer may store names verbatim (``orders%v2``, a 250-byte
name) where ours percent-encodes or shortens them, and the format's
``key`` field exists so that readers need not know how names were encoded.
"""

from __future__ import annotations

from airflow_rbak.codec import BackupManifest, CodecError, QueueBackup
from airflow_rbak.repository import chain


def owner_prefixes(manifest: BackupManifest) -> frozenset[str]:
    """The backup ids whose objects this manifest may read: its own and the bases it declares (stream chains).

    A malformed ``depends_on`` declares nothing here (validate names it), so every other folder stays foreign.
    """
    try:
        return chain.allowed_owners(manifest)
    except CodecError:
        return frozenset({manifest.backup_id})


def key_defect(key: str, allowed: frozenset[str], backup_id: str) -> str | None:
    """Why ``key`` is not an object of a backup that may read the folders ``allowed``, or None when it is.

    Inside means below the folder with every path segment a plain name: an empty, ``.`` or ``..`` segment
    could name an object elsewhere, and so could ``.`` or ``..`` between backslashes, which some stores take for
    separators. A backslash inside a name is a name's character like any other.
    """
    owner, _, rest = key.partition("/")
    if owner not in allowed:
        return (f"not an object of backup {backup_id!r}: it lies in the folder of backup {owner!r}, which its "
                "depends_on does not declare")
    parts = rest.split("/")
    if not rest or "\0" in key or any(part in ("", ".", "..") for part in parts) or any(
            piece in (".", "..") for part in parts for piece in part.split("\\")):
        return f"not an object of backup {backup_id!r}: the key does not stay inside the folder of backup {owner!r}"
    return None


def queue_defects(manifest: BackupManifest, queue: QueueBackup) -> dict[str, str]:
    """Each segment key of ``queue`` that is not an object of this backup (or a declared base), with why."""
    allowed = owner_prefixes(manifest)
    return {segment.key: reason for segment in queue.segments
            if (reason := key_defect(segment.key, allowed, manifest.backup_id)) is not None}


def definitions_defect(manifest: BackupManifest) -> str | None:
    """Why the manifest's definitions key is not this backup's object, or None when it is (or there is none).

    The export is the backup's own: a chain's bases lend segments, never definitions.
    """
    if manifest.definitions is None:
        return None
    return key_defect(manifest.definitions.key, frozenset({manifest.backup_id}), manifest.backup_id)


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
