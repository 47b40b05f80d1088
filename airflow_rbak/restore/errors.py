"""Errors of the restore engine: each names what failed and what to do; none carries a secret."""

from __future__ import annotations

from airflow_rbak.exceptions import RbakError


class RestoreError(RbakError):
    """A restore step failed."""


class BackupNotRestorableError(RestoreError):
    """The chosen backup cannot be restored as it is (incomplete, missing, or no such queue)."""


class RestoreRefusedError(RestoreError):
    """The restore would change its target beyond what it was told to (e.g. add to queues that hold messages)."""


class DamagedSegmentsError(RestoreError):
    """Segments the restore would use failed verification; ``defects`` maps each key to its reasons."""

    def __init__(self, message: str, defects: dict[str, list[str]]) -> None:
        super().__init__(message)
        self.defects = defects


class DefinitionsImportError(RestoreError):
    """The definitions could not be read, saved for rollback or imported; nothing was published."""


class DefinitionsRollbackError(RestoreError):
    """A definitions rollback cannot start or did not return the target to its snapshot."""


class PublishError(RestoreError):
    """Publishing stopped part-way (nack, channel closed, connection lost); a re-run resumes after the checkpoint."""


class TargetChangedError(RestoreError):
    """The target queue holds fewer messages than the checkpoint expects: someone consumed or purged it."""


class UnroutableMessagesError(RestoreError):
    """Some records were returned unroutable by the broker; the report lists their positions."""


class MigrationRefusedError(RestoreRefusedError):
    """A transformation refused queues (a loss nobody accepted): they were left out, everything else restored."""


class RestoreRejectedError(RestoreRefusedError):
    """Nobody approved the restore's plan (rejected, or no answer in time): nothing was imported or published."""


class PlanChangedError(RestoreRefusedError):
    """What a step would do is no longer what the approved plan pinned (the export, the import, a resume point)."""


class UnexpectedMessagesError(RestoreRefusedError, TargetChangedError):
    """The target holds messages this restore cannot account for (a deleted checkpoint of it, or another publisher):
    refused before anything was sent."""


class RestoreClaimedError(RestoreRefusedError):
    """Another run holds this queue restore's claim (it is publishing the same queue); this run sent nothing."""
