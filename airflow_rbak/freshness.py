"""Is a backup location's newest complete backup recent enough? The ``rbak_freshness`` DAG asks for each location.

A backup that stops running fails loudly only when it runs: a DAG paused by
mistake, a scheduler that is down or a schedule set to ``none`` produce no
failure at all. Checking the result (the newest ``completed_at`` in
storage) rather than Airflow's run history catches all of them, and also a
backup written by ``rbak backup`` or another Airflow.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from airflow_rbak.exceptions import ConfigurationError, RbakError
from airflow_rbak.repository.catalog import list_backups
from airflow_rbak.storage.base import Storage

HOUR_MS = 3_600_000


class StaleBackupError(RbakError):
    """The newest complete backup of a location is older than allowed, or there is none."""


@dataclass(frozen=True)
class Freshness:
    """The newest complete backup of one location and its age."""

    storage_url: str
    max_age_hours: float
    backup_id: str | None = None
    completed_at: int | None = None
    age_hours: float | None = None

    @property
    def fresh(self) -> bool:
        return self.age_hours is not None and self.age_hours <= self.max_age_hours

    def describe(self) -> str:
        if self.backup_id is None:
            return f"{self.storage_url} holds no complete backup"
        return (f"{self.storage_url}: newest complete backup {self.backup_id} finished {self.age_hours:.1f} h ago "
                f"(allowed: {self.max_age_hours:g} h)")

    def raise_if_stale(self) -> None:
        if not self.fresh:
            raise StaleBackupError(f"backup too old: {self.describe()}")

    def to_json(self) -> dict[str, Any]:
        return {**asdict(self), "fresh": self.fresh}


def measure_freshness(storage: Storage, max_age_hours: float, now_ms: int) -> Freshness:
    """The location's newest complete backup (by ``completed_at``) and its age, fresh or not."""
    if not max_age_hours > 0:
        raise ConfigurationError(f"max_age_hours must be > 0, got {max_age_hours!r}")
    complete = [s for s in list_backups(storage, now_ms=now_ms)
                if s.status == "complete" and s.completed_at is not None and not s.journal_archive]
    newest = max(complete, key=lambda s: s.completed_at or 0, default=None)
    if newest is None:
        return Freshness(storage.url, max_age_hours)
    return Freshness(storage.url, max_age_hours, newest.backup_id, newest.completed_at,
                     (now_ms - (newest.completed_at or 0)) / HOUR_MS)


def check_freshness(storage: Storage, max_age_hours: float, now_ms: int) -> Freshness:
    """:func:`measure_freshness`; raises StaleBackupError when the newest complete backup is too old or absent."""
    found = measure_freshness(storage, max_age_hours, now_ms)
    found.raise_if_stale()
    return found
