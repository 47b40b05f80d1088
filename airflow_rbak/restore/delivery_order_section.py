"""The queues whose target delivers messages of different priorities in another order than the source did
(:mod:`.delivery_order`), as a plan section: each queue's warning, set once the target's version is known."""

from __future__ import annotations

from airflow_rbak.display import md_code
from airflow_rbak.restore import delivery_order
from airflow_rbak.restore.request import RestoreRequest
from airflow_rbak.restore.restore_plan import QueuePlan, RestorePlan
from airflow_rbak.restore.section import PlanSection


class DeliveryOrder(PlanSection):
    """Each queue's delivery-order warning: in the plan, under its line in the log, and in the approval."""

    name = "delivery order"

    def with_target(self, plan: RestorePlan, request: RestoreRequest) -> RestorePlan:
        """The warnings follow from the backup's and the target's versions, so they are set once both are known."""
        return delivery_order.with_warnings(plan)

    def queue_log_lines(self, queue: QueuePlan) -> list[str]:
        """The queue's warning, if any."""
        return [f"    WARNING: {queue.delivery_order_warning}"] if queue.delivery_order_warning else []

    def approval_lines(self, plan: RestorePlan, request: RestoreRequest) -> list[str]:
        """Every warned queue with its warning."""
        warned = [q for q in plan.queues if q.delivery_order_warning]
        if not warned:
            return []
        return ["", f"### Delivery order ({len(warned)} queues)", ""] + [
            f"- {md_code(f'{q.target_vhost}/{q.target_queue}')}: {md_code(q.delivery_order_warning or '')}"
            for q in warned]


SECTION = DeliveryOrder()
