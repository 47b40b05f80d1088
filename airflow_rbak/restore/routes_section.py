"""Exchange mode's routes (:mod:`.exchange_routes`) as a plan section: under each queue in the log, counted in the
approval's summary, and a table per queue in its full plan."""

from __future__ import annotations

from airflow_rbak.restore import exchange_routes
from airflow_rbak.restore.request import RestoreRequest
from airflow_rbak.restore.restore_plan import QueuePlan, RestorePlan
from airflow_rbak.restore.section import Placement, PlanSection


class ExchangeRoutes(PlanSection):
    """The (exchange, routing key) routes each queue's records are published with in exchange mode."""

    name = "exchange routes"
    placement = Placement(summary=20)

    def queue_log_lines(self, queue: QueuePlan) -> list[str]:
        """The queue's routes, the most used first."""
        return exchange_routes.summary_lines(queue)

    def approval_summary(self, plan: RestorePlan, request: RestoreRequest) -> list[str]:
        """How many routes from how many queues: the target's bindings decide where each lands."""
        routed = [q for q in plan.queues if q.routes or any(q.routes_more)]
        if not routed:
            return []
        return [f"- exchange mode: {sum(len(q.routes) + q.routes_more[0] for q in routed)} routes (exchange and "
                f"routing key) from {len(routed)} queues; the target's bindings decide where each lands (listed below)"]

    def approval_lines(self, plan: RestorePlan, request: RestoreRequest) -> list[str]:
        """A table of routes per queue."""
        return exchange_routes.approval_lines(plan.queues)


SECTION = ExchangeRoutes()
