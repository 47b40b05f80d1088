"""The restore's approval step: Airflow's own Human-in-the-loop ``ApprovalOperator``, asking about one plan.

Between ``plan`` and ``definitions`` the ``rbak_restore`` DAG waits for a
person to approve the plan (the task shows it, :mod:`airflow_rbak.restore.approval`
writes it). Approve: the run goes on. Reject, or no answer within the
timeout: the task fails without retries, saying so, and the tasks that would
import or publish never start (``upstream_failed``), so the run ends ``failed``
with nothing changed on the target. Dry runs go on at once, and so do runs
with ``skip_approval`` where ``[rbak] allow_skip_approval`` allows it.

Who may answer (``settings.ApprovalRules``, docs/security.md): ``[rbak] restore_approvers`` becomes Airflow's
``assigned_users``, so Airflow itself refuses anyone else's answer; and unless ``[rbak]
approval_by_trigger_user_allowed``, the user who triggered the run is left out of them, and an Approve from that
user does not count: the response is cleared and the task waits again, until the original deadline, for another
approver. A Reject from anyone counts: it changes nothing.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping, Sequence
from typing import Any

from airflow.providers.standard.exceptions import HITLRejectException
from airflow.providers.standard.operators.hitl import ApprovalOperator
from airflow.sdk.exceptions import AirflowFailException, TaskDeferred

from airflow_rbak.access import ApprovalRules
from airflow_rbak.airflow_settings import rbak_settings
from airflow_rbak.display import package_logger
from airflow_rbak.operators.backup import run_step
from airflow_rbak.restore import RestorePlan, RestoreRequest
from airflow_rbak.restore.approval import approval_body, approval_not_needed, approval_subject, rejection

try:  # Airflow 3.3+ parks the task in awaiting_input; older ones defer it to a trigger
    from airflow.sdk.exceptions import TaskAwaitingInput
    _WAITS: tuple[type[BaseException], ...] = (TaskAwaitingInput, TaskDeferred)
except ImportError:  # pragma: no cover - Airflow < 3.3
    _WAITS = (TaskDeferred,)

log = package_logger(__name__)  # not self.log: Airflow's structlog task logger takes no filter


def triggering_user(context: Mapping[str, Any]) -> str | None:
    """The user who triggered the run (Airflow 3.1+ records it on the run; None for a scheduled run)."""
    return getattr(context.get("dag_run"), "triggering_user_name", None) or None


class RbakRestoreApprovalOperator(ApprovalOperator):
    """Wait until a person approves the restore plan (XCom ``plan``); a rejection or a timeout fails the task.

    ``skip_approval`` (templated, e.g. ``{{ params.skip_approval }}``) skips the wait where ``[rbak]
    allow_skip_approval`` allows it, and fails the task otherwise; a dry run never waits. No answer within
    ``response_timeout`` counts as ``Reject``.
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
        rules = run_step("approval", self.rules)
        skip = self.skip_approval in (True, "True", "true")  # native or text
        if skip and not settings.dry_run and not rules.skip_allowed:
            raise AirflowFailException(f"rbak approval refused: {rules.skip_refusal()}")
        skipped = approval_not_needed(settings, skip)
        if skipped:  # what would have been asked is still said, for the run's record
            log.info("no approval asked (%s) for: %s", skipped, approval_subject(RestorePlan.from_json(dict(self.plan))))
            return {"approved": True, "asked": False, "reason": skipped}
        assigned = run_step("approval", lambda: rules.assigned(triggering_user(context)))
        self.assigned_users = [{"id": user, "name": user} for user in assigned] or None
        plan = RestorePlan.from_json(dict(self.plan))
        self.subject, self.body = approval_subject(plan), approval_body(plan, settings, self.rabbitmq_conn_id)
        log.info("waiting for approval of: %s (timeout %s, then rejected; approvers: %s)", self.subject,
                 self.response_timeout, ", ".join(assigned) or "any user Airflow allows")
        deadline = dt.datetime.now(dt.timezone.utc) + self.response_timeout if self.response_timeout else None
        return self._wait(context, deadline)

    def rules(self) -> ApprovalRules:
        """Who may answer, and whether a run may skip the approval: the ``[rbak]`` options now."""
        return rbak_settings().approval_rules()

    def _wait(self, context: Any, deadline: dt.datetime | None) -> Any:
        """Ask (or ask again: a stored response is cleared) and park the task until ``deadline``, which travels
        with the task so that asking again never extends it."""
        try:
            return super().execute(context)
        except _WAITS as waiting:  # both carry the kwargs execute_complete is resumed with
            waiting.kwargs = {**(getattr(waiting, "kwargs", None) or {}),  # type: ignore[attr-defined]
                              "deadline": deadline.isoformat() if deadline else None}
            raise

    def execute_complete(self, context: Any, event: dict[str, Any], deadline: str | None = None) -> Any:
        user = event.get("responded_by_user") or {}
        if "error" not in event and list(event.get("chosen_options") or ()) == [self.APPROVE]:
            refusal = self.rules().approval_refusal((user.get("id"), user.get("name")), triggering_user(context))
            if refusal:
                return self._ask_again(context, refusal, deadline)
        try:
            return super().execute_complete(context, event)
        except HITLRejectException:
            error = rejection(RestorePlan.from_json(dict(self.plan)), user.get("name") or user.get("id"),
                              bool(event.get("timedout")), self.response_timeout)
            raise AirflowFailException(f"rbak approval: {error}") from None

    def _ask_again(self, context: Any, refusal: str, deadline: str | None) -> Any:
        """An Approve that does not count: wait for another approver until the first deadline (then it is over)."""
        until = dt.datetime.fromisoformat(deadline) if deadline else None
        now = dt.datetime.now(dt.timezone.utc)
        if until is not None and until <= now:
            raise AirflowFailException(f"rbak approval: the approval did not count ({refusal}) and the time to approve "
                                       "has run out; nothing was imported or published")
        log.warning("the approval does not count: %s; waiting for another approver%s", refusal,
                    f" until {until.isoformat()}" if until else "")
        self.response_timeout = until - now if until is not None else self.response_timeout
        return self._wait(context, until)
