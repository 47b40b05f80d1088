"""Lists the backups under a storage location with their state and totals."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from airflow_rbak.backup.manifest_store import ManifestNotFoundError, ManifestStore
from airflow_rbak.exceptions import RbakError
from airflow_rbak.storage.base import Storage


@dataclass(frozen=True)
class BackupSummary:
    """One backup as ``rbak list`` shows it; ``status`` is complete, incomplete, no-manifest or damaged."""

    backup_id: str
    status: str
    created_at: int | None = None
    completed_at: int | None = None
    queues: int = 0
    total_messages: int = 0
    total_bytes: int = 0
    total_segments: int = 0
    problem: str | None = None

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def list_backups(storage: Storage) -> list[BackupSummary]:
    """Every backup under ``storage``, oldest first (those without a readable manifest last)."""
    store = ManifestStore(storage)
    summaries = [_summary(store, backup_id) for backup_id in store.backup_ids()]
    return sorted(summaries, key=lambda s: (s.created_at is None, s.created_at or 0, s.backup_id))


def latest_complete(storage: Storage) -> BackupSummary | None:
    """The most recently created backup that completed, for ``backup_id=latest``."""
    complete = [s for s in list_backups(storage) if s.status == "complete"]
    return complete[-1] if complete else None


def _summary(store: ManifestStore, backup_id: str) -> BackupSummary:
    try:
        manifest = store.load(backup_id)
    except ManifestNotFoundError:
        return BackupSummary(backup_id, "no-manifest", problem="no manifest.json; try `rbak manifest rebuild`")
    except RbakError as exc:  # a damaged manifest, a stray folder, a storage fault: still list the rest
        return BackupSummary(backup_id, "damaged", problem=str(exc))
    return BackupSummary(
        backup_id=backup_id,
        status="complete" if manifest.completed_at is not None else "incomplete",
        created_at=manifest.created_at,
        completed_at=manifest.completed_at,
        queues=len(manifest.queues),
        total_messages=manifest.total_messages,
        total_bytes=manifest.total_bytes,
        total_segments=manifest.total_segments,
    )
