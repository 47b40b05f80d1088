"""What one restore feature contributes to a plan: its lines, its report fields, its refusal.

A restore's features (a selection, a dead-letter replay, exchange routes, message sizes, the transformations, ...)
each show up in the same places: the plan as it is logged, the approval request (a line in its summary, a section
of its full plan), the report, and the refusal that stops a restore before anything changes. A feature is one
:class:`PlanSection` that says all of it in one module, registered once (:mod:`.sections`); the planner, the
approval and the run ask the registry and name no feature. Every method has a default that contributes nothing, so
a section implements only what its feature shows.

A section reads the plan and the request only: what it shows is what the approver sees and what the sealed plan
pins (:mod:`.authority`), never something read again from a broker.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from airflow_rbak.restore.errors import RestoreRefusedError
from airflow_rbak.restore.request import RestoreRequest
from airflow_rbak.restore.restore_plan import QueuePlan, RestorePlan

#: Where a section that names no place stands: after every section that does, in the order they were registered.
LAST = 1000


@dataclass(frozen=True)
class Placement:
    """Where a section's contribution stands among the others' on each page, lower first.

    The approval's full plan lists sections in the order they are registered; the other pages keep the order
    their readers know (the plan's log puts the definitions first, the approval's summary its counts of them).
    """

    log: int = LAST
    summary: int = LAST
    refusal: int = LAST
    report: int = LAST


class PlanSection:
    """One restore feature's part of the plan (the protocol; each method's default contributes nothing)."""

    #: A unique name, for the registry and for logs.
    name: str = ""
    placement: Placement = Placement()

    def with_definitions(self, plan: RestorePlan, request: RestoreRequest) -> RestorePlan:
        """The plan once the definitions import was planned, before the target's queues are inspected."""
        return plan

    def with_target(self, plan: RestorePlan, request: RestoreRequest) -> RestorePlan:
        """The plan once the target was inspected (its version, its queues' depths)."""
        return plan

    def queue_log_lines(self, queue: QueuePlan) -> list[str]:
        """Log lines shown under one queue's line of the plan."""
        return []

    def log_lines(self, plan: RestorePlan) -> list[str]:
        """Log lines of the plan as a whole."""
        return []

    def approval_summary(self, plan: RestorePlan, request: RestoreRequest) -> list[str]:
        """Markdown list items of the approval's summary (counts and the warnings that need a second look)."""
        return []

    def approval_lines(self, plan: RestorePlan, request: RestoreRequest) -> list[str]:
        """Markdown of the approval's full plan (a ``###`` section each)."""
        return []

    def report_fields(self, plan: RestorePlan) -> dict[str, Any]:
        """Fields the restore's report carries for this feature (JSON-able)."""
        return {}

    def refusal(self, plan: RestorePlan, request: RestoreRequest) -> str | None:
        """Why the whole restore must not touch the target (None: nothing to refuse); a dry run only logs it."""
        return None

    def left_out(self, plan: RestorePlan) -> RestoreRefusedError | None:
        """The error a report ends with when this feature left queues out and restored the others (None: none)."""
        return None
