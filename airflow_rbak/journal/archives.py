"""The archives of a vhost's journal in a location: their ids, and the newest one the next run continues from.

Each archive run writes one ordinary backup, ``journal-<UTC time>-<first 12 hex of sha256(vhost)>``, whose manifest
has the ``journal`` addition (``codec/journal_layout.py``). The chain's checks (every ``previous`` link, contiguous ranges) are
the recovery's (``repository/journal_chain.py``); the writer only needs the newest archive, and whether the one it
names as previous is still there.
"""

from __future__ import annotations

from dataclasses import dataclass

from airflow_rbak.codec import BackupManifest
from airflow_rbak.codec.errors import ManifestError
from airflow_rbak.codec.journal_layout import ARCHIVE_PREFIX, JOURNAL, archive_id, is_archive, is_archive_id, vhost_tag
from airflow_rbak.codec.layout import MANIFEST_NAME
from airflow_rbak.repository.manifest_store import ManifestNotFoundError, ManifestStore
from airflow_rbak.storage.base import Storage

__all__ = ["JOURNAL", "Newest", "archive_id", "archive_ids", "newest_archive"]


def archive_ids(storage: Storage, vhost: str) -> list[str]:
    """The ids of the vhost's archives that have a manifest, oldest first (ids sort by time)."""
    suffix = f"-{vhost_tag(vhost)}/{MANIFEST_NAME}"
    return sorted(info.key.split("/", 1)[0] for info in storage.list(ARCHIVE_PREFIX) if info.key.endswith(suffix)
                  and info.key.count("/") == 1 and is_archive_id(info.key.split("/", 1)[0]))


@dataclass(frozen=True)
class Newest:
    """The newest completed archive of a vhost (None: none yet) and the id it names as previous when that is gone."""

    manifest: BackupManifest | None
    missing_previous: str | None = None
    #: The newest completed archive older than the missing one (the gap runs from its ``to``).
    before_missing: BackupManifest | None = None

    @property
    def to(self) -> int | None:
        return None if self.manifest is None else int(self.manifest.extensions[JOURNAL]["to"])


def newest_archive(storage: Storage, vhost: str) -> Newest:
    """The newest completed archive of ``vhost`` (an interrupted one is skipped: its messages were never acked)."""
    store = ManifestStore(storage)
    completed = []
    for backup_id in archive_ids(storage, vhost):
        try:
            manifest = store.load(backup_id)
        except (ManifestNotFoundError, ManifestError):
            continue
        section = manifest.extensions.get(JOURNAL)
        if manifest.completed_at is not None and is_archive(manifest) and isinstance(section, dict) \
                and section.get("vhost") == vhost and isinstance(section.get("to"), int):
            completed.append(manifest)
    if not completed:
        return Newest(None)
    newest = completed[-1]
    previous = newest.extensions[JOURNAL].get("previous")
    if isinstance(previous, str) and previous not in {m.backup_id for m in completed}:
        older = [m for m in completed[:-1] if m.backup_id < previous]
        return Newest(newest, previous, older[-1] if older else None)
    return Newest(newest)
