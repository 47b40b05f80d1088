"""Names of the continuous capture journal that the broker side, the archiver and the recovery share.

The journal is a queue of the journaled vhost, and each archive run is an ordinary backup whose id says it is one
and whose vhost it journals (docs/format.md, "journal"): one place for those names, so that the writer and every
reader agree.
"""

from __future__ import annotations

import hashlib
from datetime import datetime, timezone

#: The broker queue the journal is kept in, and the one queue entry of an archive.
JOURNAL_QUEUE = "rbak.journal"
#: The manifest addition of an archive.
JOURNAL = "journal"
#: Every archive's backup id starts so (a snapshot's never does: the backup refuses such an id).
ARCHIVE_PREFIX = "journal-"


def vhost_tag(vhost: str) -> str:
    """An archive id's last part: the first 12 hex digits of the vhost name's SHA-256."""
    return hashlib.sha256(vhost.encode("utf-8")).hexdigest()[:12]


def archive_id(vhost: str, at_ms: int) -> str:
    """The backup id of the archive of ``vhost`` started at ``at_ms`` (ids of one vhost sort by time)."""
    moment = datetime.fromtimestamp(at_ms / 1000, timezone.utc)
    return f"{ARCHIVE_PREFIX}{moment.strftime('%Y%m%dT%H%M%S%fZ')}-{vhost_tag(vhost)}"


def is_archive_id(backup_id: str) -> bool:
    """True for a journal archive's backup id (never a snapshot)."""
    return backup_id.startswith(ARCHIVE_PREFIX)
