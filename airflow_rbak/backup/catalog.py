"""Lists the backups under a storage location with their state, totals and chain dependencies.

A folder without a manifest whose only objects are segments that complete
backups still list is a *retired* base: retention removed that backup but
kept the stream segments later backups' chains take from it.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, replace
from typing import Any

from airflow_rbak.backup.chain import dependencies
from airflow_rbak.backup.manifest_store import ManifestNotFoundError, ManifestStore
from airflow_rbak.codec import BackupManifest
from airflow_rbak.codec.layout import compression_from_key
from airflow_rbak.exceptions import RbakError
from airflow_rbak.storage.base import Storage


@dataclass(frozen=True)
class BackupSummary:
    """One backup as ``rbak list`` shows it; ``status`` is complete, incomplete, no-manifest, damaged or retired.

    ``depends_on``: the backups whose segments it lists (its stream chains); ``needed_by``: the backups
    that list segments of this one, so retention keeps what they need; ``compression``: the codecs its
    segments' keys name (``zstd``, ``lz4``, ``none``), sorted.
    """

    backup_id: str
    status: str
    created_at: int | None = None
    completed_at: int | None = None
    queues: int = 0
    total_messages: int = 0
    total_bytes: int = 0
    total_segments: int = 0
    problem: str | None = None
    depends_on: tuple[str, ...] = ()
    needed_by: tuple[str, ...] = ()
    compression: tuple[str, ...] = ()

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def list_backups(storage: Storage, workers: int = 1) -> list[BackupSummary]:
    """Every backup under ``storage``, oldest first (those without a readable manifest last).

    ``workers`` > 1 reads that many manifests at a time: on S3 each read is a round trip, so a
    catalog of hundreds of backups is bound by latency, not by parsing.
    """
    store = ManifestStore(storage)
    backup_ids = store.backup_ids()
    if workers > 1 and len(backup_ids) > 1:
        with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="rbak-catalog") as pool:
            summaries = list(pool.map(lambda backup_id: _summary(store, backup_id), backup_ids))
    else:
        summaries = [_summary(store, backup_id) for backup_id in backup_ids]
    dependents: dict[str, list[str]] = {}
    for summary in summaries:
        for base in summary.depends_on:
            dependents.setdefault(base, []).append(summary.backup_id)
    summaries = [_with_dependents(storage, s, tuple(dependents.get(s.backup_id, ()))) for s in summaries]
    return sorted(summaries, key=lambda s: (s.created_at is None, s.created_at or 0, s.backup_id))


def _with_dependents(storage: Storage, summary: BackupSummary, needed_by: tuple[str, ...]) -> BackupSummary:
    if summary.status == "no-manifest" and needed_by and is_retired_folder(storage, summary.backup_id):
        return replace(summary, status="retired", needed_by=needed_by,
                       problem=f"removed by retention; holds only stream segments that {', '.join(needed_by)} list")
    return replace(summary, needed_by=needed_by)


def is_retired_folder(storage: Storage, backup_id: str) -> bool:
    """True when a backup folder holds only segments (no manifest, definitions, state): what retention leaves."""
    prefix = f"{backup_id}/queues/"
    return all(info.key.startswith(prefix) for info in storage.list(f"{backup_id}/"))


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
    try:
        depends_on = dependencies(manifest)
    except RbakError as exc:
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
        depends_on=depends_on,
        compression=segment_compressions(manifest),
    )


def segment_compressions(manifest: BackupManifest) -> tuple[str, ...]:
    """The codecs the manifest's segment keys name (``zstd``, ``lz4``, ``none``), sorted; () for no segments."""
    found = {compression_from_key(s.key).name.lower() for q in manifest.queues for s in q.segments}
    return tuple(sorted(found))
