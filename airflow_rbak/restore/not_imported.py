"""The runtime parameters a restore does not import (operator policies, shovels, federation upstreams), as the
plan's log and the approval name them: the target's operator sets them where the queues need them."""

from __future__ import annotations

from airflow_rbak.display import md_code
from airflow_rbak.restore.request import RestoreRequest
from airflow_rbak.restore.restore_plan import RestorePlan
from airflow_rbak.restore.section import Placement, PlanSection


class NotImported(PlanSection):
    """The runtime parameters of the imported vhosts that the restore leaves to the target's operator."""

    name = "not imported"
    placement = Placement(log=20)

    def log_lines(self, plan: RestorePlan) -> list[str]:
        """One line naming every parameter left out."""
        if not plan.definitions_not_imported:
            return []
        return ["  not imported (a restore imports no runtime parameters; set them on the target yourself): "
                + ", ".join(f"{p['kind']} {p['vhost']}/{p['name']}" for p in plan.definitions_not_imported)]

    def approval_lines(self, plan: RestorePlan, request: RestoreRequest) -> list[str]:
        """Every parameter left out, and why."""
        left = plan.definitions_not_imported or []
        if not left:
            return []
        return ["", f"### Not imported: runtime parameters of these vhosts ({len(left)})", "",
                "A restore imports no runtime parameters (operator policies, shovels, federation upstreams): set them on "
                "the target yourself where the queues need them.", ""] + [
            f"- {md_code(p['kind'] + ' ' + p['vhost'] + '/' + p['name'])}" for p in left]


SECTION = NotImported()
