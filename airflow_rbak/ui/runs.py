"""The Airflow DAG runs that made, verified or restored a backup, as plain data (no Airflow import).

The Airflow side (``airflow_runs.py``) reads them from the metadata database; this module only matches
them to backups, so the matching is tested without Airflow. A run names its backup in one of two
places: the ``backup_id`` it was triggered with, or, when it chose one itself (``rbak_backup`` without
a ``backup_id``, ``rbak_verify`` or ``rbak_restore`` with ``latest``), the id one of its tasks resolved.
"""

from __future__ import annotations

import re
import secrets
from collections.abc import Iterable
from dataclasses import asdict, dataclass
from typing import Any

#: The DAGs of dags/ the view reads runs of and triggers (tests/ui/test_runs.py holds them to the DAG files).
BACKUP_DAG_ID = "rbak_backup"
VERIFY_DAG_ID = "rbak_verify"
RESTORE_DAG_ID = "rbak_restore"

#: The task states after which a verify has a result.
FINISHED = ("success", "failed", "upstream_failed", "skipped")
#: The run states of a run still to finish (a second Verify click finds it rather than queueing another).
PENDING = ("queued", "running")
#: What Airflow accepts in a run id given by the trigger (``[scheduler] allowed_run_id_pattern``'s default).
_RUN_ID_UNSAFE = re.compile(r"[^A-Za-z0-9_.~:+-]")


@dataclass(frozen=True)
class BackupDagRun:
    """One DAG run of ``rbak_backup`` (kind ``backup``), ``rbak_verify`` (``verify``) or ``rbak_restore``
    (``restore``) for one backup.

    ``verify_state``/``verify_at`` are the state and end (ms since the epoch) of the task that verified (the
    backup's ``encode``, ``rbak_verify``'s ``verify``); a backup run with ``verify: none`` verifies nothing and
    carries ``verify_state`` None. ``outcome`` is a restore's report in one line, once it has one, or how it ended
    without one (rejected, failed in a task). ``failed_task`` is the first task of a failed run that failed, ``reason``
    what its log says failed it (read for one backup's page only), ``damaged`` whether that reason names damage.
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
    outcome: str | None = None
    failed_task: str | None = None
    reason: str | None = None
    damaged: bool = False

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
        """The newest finished verify task among the backup's runs (one queued or running is not a verify yet)."""
        finished = [r for r in self.runs(storage_url, backup_id) if r.verify_state in FINISHED]
        if not finished:
            return None
        run = max(finished, key=lambda r: (r.verify_at or 0, r.run_id))
        return LastVerify(str(run.verify_state), run.verify_at, run.dag_id, run.run_id)

    def pending_verify(self, storage_url: str, backup_id: str) -> BackupDagRun | None:
        """The newest ``rbak_verify`` run of the backup still queued or running, if any."""
        pending = [r for r in self.runs(storage_url, backup_id, "verify") if r.state in PENDING]
        return pending[-1] if pending else None

    def next_verify_run_id(self, location_id: str, storage_url: str, backup_id: str) -> str:
        """The run id the view gives the backup's next ``rbak_verify`` run: the same for every page shown until that
        run exists, so a second trigger of it is refused by Airflow (a run id is unique) instead of queueing twice."""
        stem = _RUN_ID_UNSAFE.sub("_", f"rbak_verify__{location_id}__{backup_id}")[:200]
        taken = [r.run_id[len(stem) + 2:] for r in self.runs(storage_url, backup_id, "verify")
                 if r.run_id.startswith(f"{stem}__")]
        return f"{stem}__{1 + max((int(n) for n in taken if n.isdigit()), default=0)}"


def restore_run_id(location_id: str, backup_id: str, token: str | None = None) -> str:
    """The run id one restore form triggers: the backup's names and a token drawn when the form is shown, so two POSTs
    of one form name one run (Airflow refuses the second) and each form opened makes its own."""
    stem = _RUN_ID_UNSAFE.sub("_", f"rbak_restore__{location_id}__{backup_id}")[:200]
    return f"{stem}__{token or secrets.token_hex(8)}"
