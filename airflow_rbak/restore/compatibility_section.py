"""What the target's RabbitMQ version does with the definitions it treats differently (:mod:`.target_compatibility`)
as a plan section: applied, changed or refused, and a refusal that stops the restore before it imports anything."""

from __future__ import annotations

from airflow_rbak.display import md_code, printable
from airflow_rbak.restore import target_compatibility
from airflow_rbak.restore.request import RestoreRequest
from airflow_rbak.restore.restore_plan import RestorePlan
from airflow_rbak.restore.section import Placement, PlanSection


class TargetCompatibility(PlanSection):
    """The definitions the target's version treats differently, and the refusal of those it rejects."""

    name = "target compatibility"
    placement = Placement(log=30, refusal=10)

    def log_lines(self, plan: RestorePlan) -> list[str]:
        """One line per finding."""
        return target_compatibility.summary_lines(plan.definitions_compatibility)

    def approval_lines(self, plan: RestorePlan, request: RestoreRequest) -> list[str]:
        """Every finding, sorted; a refused one refuses the run, and the approval says so first."""
        findings = plan.definitions_compatibility or []
        if not findings:
            return []
        refused = sum(1 for f in findings if f["outcome"] == "refused")
        lines = ["", f"### Definitions the target's RabbitMQ treats differently ({len(findings)})", ""]
        if refused:
            lines += [f"**{refused} are refused by the target, so the restore is refused.**", ""]
        return lines + [f"- {md_code(f['kind'] + ' ' + f['vhost'] + '/' + f['name'])} **{printable(f['outcome'])}**: "
                        f"{md_code(f['detail'])}" for f in sorted(findings, key=lambda f: (f["kind"], f["vhost"], f["name"]))]

    def refusal(self, plan: RestorePlan, request: RestoreRequest) -> str | None:
        """Why the import cannot run as planned (definitions the target rejects)."""
        return target_compatibility.refusal(plan.definitions_compatibility)


SECTION = TargetCompatibility()
