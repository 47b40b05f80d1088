"""Names of the continuous capture journal that the broker side, the archiver and the recovery share.

The journal is a queue of the journaled vhost, and each archive run is an ordinary backup whose id says it is one
and whose vhost it journals (docs/format.md, "journal"): one place for those names, so that the writer and every
reader agree.
"""

from __future__ import annotations

import hashlib
import re
from datetime import datetime, timezone

from airflow_rbak.codec.manifest import BackupManifest

#: The broker queue the journal is kept in, and the one queue entry of an archive.
JOURNAL_QUEUE = "rbak.journal"
#: The manifest addition of an archive.
JOURNAL = "journal"
#: Every archive's backup id starts so (a snapshot's never does: the backup refuses such an id).
ARCHIVE_PREFIX = "journal-"
#: An archive's whole id, as :func:`archive_id` writes it: the start time to the microsecond, then the vhost tag.
ARCHIVE_ID = re.compile(r"journal-[0-9]{8}T[0-9]{12}Z-[0-9a-f]{12}")


def vhost_tag(vhost: str) -> str:
    """An archive id's last part: the first 12 hex digits of the vhost name's SHA-256."""
    return hashlib.sha256(vhost.encode("utf-8")).hexdigest()[:12]


def archive_id(vhost: str, at_ms: int) -> str:
    """The backup id of the archive of ``vhost`` started at ``at_ms`` (ids of one vhost sort by time)."""
    moment = datetime.fromtimestamp(at_ms / 1000, timezone.utc)
    return f"{ARCHIVE_PREFIX}{moment.strftime('%Y%m%dT%H%M%S%fZ')}-{vhost_tag(vhost)}"


def is_archive_id(backup_id: str) -> bool:
    """True when ``backup_id`` has the whole shape :func:`archive_id` gives (the prefix alone says nothing: another
    tool may name its backups so)."""
    return ARCHIVE_ID.fullmatch(backup_id) is not None


def is_archive(manifest: BackupManifest) -> bool:
    """True for a journal archive: an archive's id and a manifest with the ``journal`` addition and its one queue
    :data:`JOURNAL_QUEUE`. Anything else is a snapshot, under the snapshot rules (``latest``, freshness, retention),
    whatever its id starts with."""
    return (is_archive_id(manifest.backup_id) and isinstance(manifest.extensions.get(JOURNAL), dict)
            and len(manifest.queues) == 1 and manifest.queues[0].name == JOURNAL_QUEUE)
