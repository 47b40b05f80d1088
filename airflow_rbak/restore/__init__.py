"""Restore of RBAK backups into RabbitMQ: plan, definitions, publish per queue, report.

No Airflow here: the operators and the ``rbak_restore`` DAG call these steps.
"""

from __future__ import annotations

from airflow_rbak.restore.errors import (
    BackupNotRestorableError,
    DamagedSegmentsError,
    DefinitionsImportError,
    DefinitionsRollbackError,
    PlanChangedError,
    PublishError,
    RestoreClaimedError,
    RestoreError,
    RestoreRefusedError,
    RestoreRejectedError,
    TargetChangedError,
    UnexpectedMessagesError,
    UnroutableMessagesError,
)
from airflow_rbak.restore.plan import plan_restore
from airflow_rbak.restore.queue_restore import QueueResult
from airflow_rbak.restore.request import DefinitionsSelection, RestoreRequest, parse_time
from airflow_rbak.restore.restore_plan import QueuePlan, RestorePlan, SegmentPlan, SkippedSegment
from airflow_rbak.restore.run import RestoreReport, RestoreRun

__all__ = [
    "BackupNotRestorableError",
    "DamagedSegmentsError",
    "DefinitionsImportError",
    "DefinitionsRollbackError",
    "DefinitionsSelection",
    "PlanChangedError",
    "PublishError",
    "QueuePlan",
    "QueueResult",
    "RestoreClaimedError",
    "RestoreError",
    "RestoreRefusedError",
    "RestoreRejectedError",
    "RestorePlan",
    "RestoreReport",
    "RestoreRequest",
    "RestoreRun",
    "SegmentPlan",
    "SkippedSegment",
    "TargetChangedError",
    "UnexpectedMessagesError",
    "UnroutableMessagesError",
    "parse_time",
    "plan_restore",
]
