"""The ``copy`` task of ``rbak_backup``: the backup just written, copied to ``copy_to`` with its chain (optional)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from airflow.sdk import BaseOperator
from airflow.sdk.exceptions import AirflowFailException, AirflowSkipException

from airflow_rbak.airflow_settings import rbak_settings
from airflow_rbak.display import package_logger, printable
from airflow_rbak.operators.steps import run_step
from airflow_rbak.operators.storage_connection import StorageConnectionMixin
from airflow_rbak.repository.second_copy import REFUSED, copy_backups
from airflow_rbak.storage import open_storage

log = package_logger(__name__)  # not self.log: Airflow's structlog task logger takes no filter


class RbakCopyBackupOperator(StorageConnectionMixin, BaseOperator):
    """Copy one complete backup (and the chain bases it needs) to a second location, verified there, then apply that
    location's own retention (:mod:`airflow_rbak.repository.second_copy`); skipped when ``copy_to`` is empty."""

    template_fields: Sequence[str] = ("storage_url", "backup_id", "copy_to", "copy_retention")

    def __init__(self, *, storage_url: str, backup_id: str, copy_to: str | None = None,
                 copy_retention: dict[str, Any] | None = None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.storage_url, self.backup_id, self.copy_to, self.copy_retention = storage_url, backup_id, copy_to, copy_retention

    def execute(self, context: Any) -> dict[str, Any]:
        if not self.copy_to:
            raise AirflowSkipException("no copy_to: this backup has no second copy")
        policy = run_step("copy retention settings",  # the param bounded by [rbak] copy_retention, checked here
                          lambda: rbak_settings().run_retention("copy_retention", self.copy_retention))
        report = run_step("copy", lambda: copy_backups(open_storage(str(self.storage_url)), open_storage(str(self.copy_to)),
                                                       [str(self.backup_id)], retention=policy))
        log.info("%s", printable(report.describe()))
        if report.ids(REFUSED):  # a damaged backup stays damaged: a retry would only be refused again
            raise AirflowFailException(printable("rbak copy refused: " + "; ".join(
                f"{b.backup_id}: {b.reason}" for b in report.backups if b.outcome == REFUSED)))
        return report.to_json()
