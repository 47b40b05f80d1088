"""The restore's approval step: Airflow's own Human-in-the-loop ``ApprovalOperator``, asking about one plan.

Between ``plan`` and ``definitions`` the ``rbak_restore`` DAG waits for a
person to approve the plan (the task shows it, :mod:`airflow_rbak.restore.approval`
writes it). Approve: the run goes on. Reject, or no answer within the
timeout: the task fails without retries, saying so, and the tasks that would
import or publish never start (``upstream_failed``), so the run ends ``failed``
with nothing changed on the target. Dry runs and runs with ``skip_approval``
go on at once.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping, Sequence
from typing import Any

from airflow.providers.standard.exceptions import HITLRejectException
from airflow.providers.standard.operators.hitl import ApprovalOperator
from airflow.sdk.exceptions import AirflowFailException

from airflow_rbak.display import package_logger
from airflow_rbak.operators.backup import run_step
from airflow_rbak.restore import RestorePlan, RestoreRequest
from airflow_rbak.restore.approval import approval_body, approval_not_needed, approval_subject, rejection

log = package_logger(__name__)  # not self.log: Airflow's structlog task logger takes no filter


class RbakRestoreApprovalOperator(ApprovalOperator):
    """Wait until a person approves the restore plan (XCom ``plan``); a rejection or a timeout fails the task.

    ``skip_approval`` (templated, e.g. ``{{ params.skip_approval }}``) and a dry run skip the wait. No answer
    within ``response_timeout`` counts as ``Reject``.
    """

    template_fields: Sequence[str] = (*ApprovalOperator.template_fields, "plan", "restore_request", "rabbitmq_conn_id",
                                      "skip_approval")

    def __init__(self, *, plan: Mapping[str, Any], restore_request: Mapping[str, Any],
                 rabbitmq_conn_id: str = "rabbitmq_default", skip_approval: bool | str = False,
                 response_timeout: dt.timedelta | None = None, **kwargs: Any) -> None:
        super().__init__(subject="Approve the restore plan", fail_on_reject=True, defaults=ApprovalOperator.REJECT,
                         response_timeout=response_timeout, **kwargs)
        self.plan, self.restore_request = plan, restore_request
        self.rabbitmq_conn_id, self.skip_approval = rabbitmq_conn_id, skip_approval

    def execute(self, context: Any) -> Any:
        settings = run_step("approval", lambda: RestoreRequest(**dict(self.restore_request)))
        skipped = approval_not_needed(settings, self.skip_approval in (True, "True", "true"))  # native or text
        if skipped:
            log.info("no approval asked: %s", skipped)
            return {"approved": True, "asked": False, "reason": skipped}
        plan = RestorePlan.from_json(dict(self.plan))
        self.subject, self.body = approval_subject(plan), approval_body(plan, settings, self.rabbitmq_conn_id)
        log.info("waiting for approval of: %s (timeout %s, then rejected)", self.subject, self.response_timeout)
        return super().execute(context)

    def execute_complete(self, context: Any, event: dict[str, Any]) -> Any:
        try:
            return super().execute_complete(context, event)
        except HITLRejectException:
            user = event.get("responded_by_user") or {}
            error = rejection(RestorePlan.from_json(dict(self.plan)), user.get("name") or user.get("id"),
                              bool(event.get("timedout")), self.response_timeout)
            raise AirflowFailException(f"rbak approval: {error}") from None
