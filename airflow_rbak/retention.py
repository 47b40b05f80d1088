"""Which old backups a retention policy removes, and removing them (no Airflow here).

Only backups that are complete *and* superseded by a newer complete backup
are ever candidates, and the one just written is never one: an incomplete or
damaged backup may be the only copy of something, so retention leaves it to
a human. A backup is kept when any configured rule keeps it (among the
newest ``keep_last``, or younger than ``max_age_days``); with no rule set
nothing is removed.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from airflow_rbak.backup.catalog import BackupSummary, list_backups
from airflow_rbak.codec.layout import check_backup_id, manifest_key
from airflow_rbak.exceptions import ConfigurationError
from airflow_rbak.storage.base import Storage

_DAY_MS = 86_400_000


@dataclass(frozen=True)
class RetentionPolicy:
    """Keep the newest ``keep_last`` complete backups and/or those younger than ``max_age_days``."""

    keep_last: int | None = None
    max_age_days: float | None = None

    def __post_init__(self) -> None:
        if self.keep_last is not None and (not isinstance(self.keep_last, int) or self.keep_last < 1):
            raise ConfigurationError(f"retention keep_last must be an integer >= 1, got {self.keep_last!r}")
        if self.max_age_days is not None and not self.max_age_days > 0:
            raise ConfigurationError(f"retention max_age_days must be > 0, got {self.max_age_days!r}")

    @classmethod
    def from_json(cls, value: Mapping[str, Any] | None) -> RetentionPolicy:
        """From the DAG's ``retention`` param (``null`` or ``{"keep_last": N, "max_age_days": D}``)."""
        value = value or {}
        unknown = set(value) - {"keep_last", "max_age_days"}
        if unknown:
            raise ConfigurationError(f"unknown retention settings {sorted(unknown)}; use keep_last and/or max_age_days")
        return cls(value.get("keep_last"), value.get("max_age_days"))

    @property
    def active(self) -> bool:
        return self.keep_last is not None or self.max_age_days is not None


def select_expired(backups: list[BackupSummary], policy: RetentionPolicy, *, now_ms: int, protect: str) -> list[str]:
    """The ids of the backups ``policy`` removes, oldest first; never ``protect``, never an incomplete one."""
    if not policy.active:
        return []
    complete = sorted((b for b in backups if b.status == "complete"), key=lambda b: (b.created_at or 0, b.backup_id))
    newest_first = list(reversed(complete))
    kept_by_count = {b.backup_id for b in newest_first[: policy.keep_last or 0]}
    expired = []
    for position, backup in enumerate(newest_first):
        if backup.backup_id == protect or position == 0:  # the newest complete backup supersedes, it is never superseded
            continue
        young = policy.max_age_days is not None and (now_ms - (backup.completed_at or 0)) < policy.max_age_days * _DAY_MS
        if backup.backup_id in kept_by_count or young:
            continue
        expired.append(backup.backup_id)
    return list(reversed(expired))


def delete_backup(storage: Storage, backup_id: str) -> int:
    """Remove every object of one backup, its manifest first (a half-removed backup never looks complete)."""
    prefix = f"{check_backup_id(backup_id)}/"
    keys = [info.key for info in storage.list(prefix)]
    manifest = manifest_key(backup_id)
    if manifest in keys:
        storage.delete(manifest)
    for key in keys:
        if key != manifest:
            storage.delete(key)
    return len(keys)


def apply_retention(storage: Storage, policy: RetentionPolicy, *, now_ms: int, protect: str) -> list[str]:
    """Delete what :func:`select_expired` picks; return the removed backup ids."""
    expired = select_expired(list_backups(storage), policy, now_ms=now_ms, protect=protect)
    for backup_id in expired:
        delete_backup(storage, backup_id)
    return expired
