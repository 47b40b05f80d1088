"""Damaged segments a restore skips (``skip_damaged_segments``) as the plan's log and the approval name them."""

from __future__ import annotations

from airflow_rbak.display import md_code
from airflow_rbak.restore.request import RestoreRequest
from airflow_rbak.restore.restore_plan import RestorePlan
from airflow_rbak.restore.section import Placement, PlanSection


class DamagedSegments(PlanSection):
    """Every skipped segment, with the records it held and why it failed verification."""

    name = "damaged segments"
    placement = Placement(log=40, summary=50)

    def log_lines(self, plan: RestorePlan) -> list[str]:
        """One line per skipped segment."""
        return [f"  SKIPPED damaged segment {s.key} ({s.record_count} records): {'; '.join(s.reasons)}"
                for s in plan.skipped_segments]

    def approval_summary(self, plan: RestorePlan, request: RestoreRequest) -> list[str]:
        """How many segments and records are skipped: a warning the approver must see."""
        if not plan.skipped_segments:
            return []
        return [f"- **{len(plan.skipped_segments)} damaged segments are skipped** "
                f"({sum(s.record_count for s in plan.skipped_segments)} records)"]

    def approval_lines(self, plan: RestorePlan, request: RestoreRequest) -> list[str]:
        """Every skipped segment, sorted by key."""
        if not plan.skipped_segments:
            return []
        lines = ["", f"### Damaged segments skipped ({len(plan.skipped_segments)})", ""]
        return lines + [f"- {md_code(s.key)} ({s.record_count} records of {md_code(f'{s.vhost}/{s.queue}')}): "
                        f"{md_code('; '.join(s.reasons))}" for s in sorted(plan.skipped_segments, key=lambda s: s.key)]


SECTION = DamagedSegments()
