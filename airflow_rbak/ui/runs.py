"""The Airflow DAG runs that made or verified a backup, as plain data (no Airflow import).

The Airflow side (``airflow_runs.py``) reads them from the metadata database; this module only matches
them to backups, so the matching is tested without Airflow. A run names its backup in one of two
places: the ``backup_id`` it was triggered with, or, when it chose one itself (``rbak_backup`` without
a ``backup_id``, ``rbak_verify`` with ``latest``), the id its first task resolved.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import asdict, dataclass
from typing import Any

#: The DAGs of dags/ the view reads runs of and triggers (tests/ui/test_runs.py holds them to the DAG files).
BACKUP_DAG_ID = "rbak_backup"
VERIFY_DAG_ID = "rbak_verify"
RESTORE_DAG_ID = "rbak_restore"

#: The task states after which a verify has a result.
FINISHED = ("success", "failed", "upstream_failed", "skipped")


@dataclass(frozen=True)
class BackupDagRun:
    """One DAG run of ``rbak_backup`` (kind ``backup``) or ``rbak_verify`` (kind ``verify``) for one backup.

    ``verify_state``/``verify_at`` are the state and end (ms since the epoch) of the task that verified (the
    backup's ``encode``, ``rbak_verify``'s ``verify``); a
    backup run with ``verify: none`` verifies nothing and carries ``verify_state`` None.
    """

    dag_id: str
    run_id: str
    kind: str
    storage_url: str
    backup_id: str
    state: str
    started_at: int | None = None
    ended_at: int | None = None
    verify_state: str | None = None
    verify_at: int | None = None

    def to_json(self) -> dict[str, Any]:
        body = asdict(self)
        del body["storage_url"]  # the page already names the location
        return body


@dataclass(frozen=True)
class LastVerify:
    """The newest verify of a backup: its outcome (a task state), when it ended, and the run that did it."""

    state: str
    at: int | None
    dag_id: str
    run_id: str

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


class RunIndex:
    """DAG runs grouped by the (location, backup) they made or verified."""

    def __init__(self, runs: Iterable[BackupDagRun] = ()) -> None:
        self._by_backup: dict[tuple[str, str], list[BackupDagRun]] = {}
        for run in runs:
            self._by_backup.setdefault((run.storage_url, run.backup_id), []).append(run)
        for found in self._by_backup.values():
            found.sort(key=lambda r: (r.started_at or 0, r.run_id))

    def runs(self, storage_url: str, backup_id: str, kind: str | None = None) -> list[BackupDagRun]:
        """The runs for one backup, oldest first; only those of ``kind`` when given."""
        found = self._by_backup.get((storage_url, backup_id), [])
        return [r for r in found if kind is None or r.kind == kind]

    def last_verify(self, storage_url: str, backup_id: str) -> LastVerify | None:
        """The newest finished verify task among the backup's runs; else the newest verify run still to come."""
        finished = [r for r in self.runs(storage_url, backup_id) if r.verify_state in FINISHED]
        if finished:
            run = max(finished, key=lambda r: (r.verify_at or 0, r.run_id))
            return LastVerify(str(run.verify_state), run.verify_at, run.dag_id, run.run_id)
        pending = self.runs(storage_url, backup_id, "verify")
        if pending:
            run = pending[-1]
            return LastVerify(run.verify_state or run.state, None, run.dag_id, run.run_id)
        return None
