"""The restore's features as plan sections, registered once, and what the planner, the approval and the run ask of
them all.

The built-in sections are listed here once, in the order the approval's full plan shows them; any other
(a feature of a deployment, a test's) is added with :func:`register` and shown after them. The functions below
put every section's contribution in its place on a page (:class:`~airflow_rbak.restore.section.Placement`), so
that :mod:`.plan`, :mod:`.approval` and :mod:`.run` name no feature.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from airflow_rbak.exceptions import ConfigurationError
from airflow_rbak.restore import (
    compatibility_section,
    damaged_segments,
    definitions_listing,
    delivery_order_section,
    journal_section,
    migration,
    not_imported,
    routes_section,
    selection_report,
    size_limits,
)
from airflow_rbak.restore.errors import RestoreRefusedError
from airflow_rbak.restore.request import RestoreRequest
from airflow_rbak.restore.restore_plan import QueuePlan, RestorePlan
from airflow_rbak.restore.section import PlanSection

#: The built-in sections, in the order the approval's full plan shows them.
BUILT_IN: tuple[PlanSection, ...] = (
    selection_report.SECTION, routes_section.SECTION, definitions_listing.SECTION, migration.SECTION,
    damaged_segments.SECTION, size_limits.SECTION, compatibility_section.SECTION, not_imported.SECTION,
    delivery_order_section.SECTION, journal_section.SECTION,
)
_added: list[PlanSection] = []


def register(section: PlanSection) -> None:
    """Add a section after the built-in ones; a name already registered is refused."""
    if not section.name or section.name in {s.name for s in registered()}:
        raise ConfigurationError(f"a restore plan section needs a name of its own, got {section.name!r}")
    _added.append(section)


def unregister(section: PlanSection) -> None:
    """Take back a section :func:`register` added (the built-in ones stay)."""
    _added.remove(section)


@contextmanager
def registered_section(section: PlanSection) -> Iterator[PlanSection]:
    """The section registered for the length of a ``with`` block."""
    register(section)
    try:
        yield section
    finally:
        unregister(section)


def registered() -> tuple[PlanSection, ...]:
    """Every section, the built-in ones first, in registration order."""
    return BUILT_IN + tuple(_added)


def _placed(page: str) -> list[PlanSection]:
    return sorted(registered(), key=lambda s: getattr(s.placement, page))


def with_definitions(plan: RestorePlan, request: RestoreRequest) -> RestorePlan:
    """The plan as every section shapes it once the definitions import was planned."""
    for section in registered():
        plan = section.with_definitions(plan, request)
    return plan


def with_target(plan: RestorePlan, request: RestoreRequest) -> RestorePlan:
    """The plan as every section completes it once the target was inspected."""
    for section in registered():
        plan = section.with_target(plan, request)
    return plan


def queue_log_lines(queue: QueuePlan) -> list[str]:
    """Every section's log lines under one queue's line of the plan."""
    return [line for section in registered() for line in section.queue_log_lines(queue)]


def log_lines(plan: RestorePlan) -> list[str]:
    """Every section's log lines of the plan as a whole."""
    return [line for section in _placed("log") for line in section.log_lines(plan)]


def approval_summary(plan: RestorePlan, request: RestoreRequest) -> list[str]:
    """Every section's items of the approval's summary."""
    return [line for section in _placed("summary") for line in section.approval_summary(plan, request)]


def approval_lines(plan: RestorePlan, request: RestoreRequest) -> list[str]:
    """Every section's Markdown of the approval's full plan, in registration order."""
    return [line for section in registered() for line in section.approval_lines(plan, request)]


def report_fields(plan: RestorePlan) -> dict[str, Any]:
    """Every section's fields of the report."""
    return {k: v for section in _placed("report") for k, v in section.report_fields(plan).items()}


def refusals(plan: RestorePlan, request: RestoreRequest) -> list[str]:
    """Why the sections refuse the restore before it touches the target (empty: none does)."""
    return [r for r in (section.refusal(plan, request) for section in _placed("refusal")) if r]


def left_out(plan: RestorePlan) -> list[RestoreRefusedError]:
    """The errors a report ends with, one per section that left queues out."""
    return [e for e in (section.left_out(plan) for section in _placed("report")) if e is not None]
