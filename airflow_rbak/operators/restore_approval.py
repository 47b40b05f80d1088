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
from airflow_rbak.airflow_settings import rbak_settings, state_seal
from airflow_rbak.display import package_logger
from airflow_rbak.operators.restore import restore_step, run_ref
from airflow_rbak.operators.steps import run_step
from airflow_rbak.restore import RestoreRequest, authority
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
        sealed = self.sealed_plan(context)
        skip = self.skip_approval in (True, "True", "true")  # native or text
        if skip and not settings.dry_run and not rules.skip_allowed:
            raise AirflowFailException(f"rbak approval refused: {rules.skip_refusal()}")
        skipped = approval_not_needed(settings, skip)
        if skipped:  # what would have been asked is still said, for the run's record, and sealed as not asked
            log.info("no approval asked (%s) for: %s", skipped, approval_subject(sealed.plan))
            mode = authority.DRY_RUN if settings.dry_run else authority.SKIPPED
            return {"approved": True, "asked": False, "reason": skipped, "approval": authority.seal_approval(
                state_seal(), run_ref(context), sealed, mode, None, context["ti"].try_number)}
        assigned = run_step("approval", lambda: rules.assigned(triggering_user(context)))
        self.assigned_users = [{"id": user, "name": user} for user in assigned] or None
        self.subject = approval_subject(sealed.plan)
        self.body = (approval_body(sealed.plan, settings, self.rabbitmq_conn_id)
                     + f"\n\nPlan of try {sealed.plan_try}, SHA-256 `{sealed.digest}`: only this plan runs once approved.")
        log.info("waiting for approval of: %s (plan SHA-256 %s; timeout %s, then rejected; approvers: %s)", self.subject,
                 sealed.digest, self.response_timeout, ", ".join(assigned) or "any user Airflow allows")
        deadline = dt.datetime.now(dt.timezone.utc) + self.response_timeout if self.response_timeout else None
        return self._wait(context, deadline, sealed)

    def sealed_plan(self, context: Any) -> authority.SealedPlan:
        """The plan the plan task sealed for this run; fails without retries when it is missing or not one."""
        return restore_step("approval", lambda: authority.open_plan(state_seal(), run_ref(context), self.plan))

    def rules(self) -> ApprovalRules:
        """Who may answer, and whether a run may skip the approval: the ``[rbak]`` options now."""
        return rbak_settings().approval_rules()

    def _wait(self, context: Any, deadline: dt.datetime | None, asked: authority.SealedPlan) -> Any:
        """Ask (or ask again: a stored response is cleared) and park the task until ``deadline``, which travels
        with the task so that asking again never extends it, as does the digest of the plan shown, so that an answer
        approves only that plan."""
        try:
            return super().execute(context)
        except _WAITS as waiting:  # both carry the kwargs execute_complete is resumed with
            waiting.kwargs = {**(getattr(waiting, "kwargs", None) or {}),  # type: ignore[attr-defined]
                              "deadline": deadline.isoformat() if deadline else None,
                              "plan_digest": asked.digest, "plan_try": asked.plan_try}
            raise

    def execute_complete(self, context: Any, event: dict[str, Any], deadline: str | None = None,
                         plan_digest: str | None = None, plan_try: int | None = None) -> Any:
        user = event.get("responded_by_user") or {}
        sealed = self.sealed_plan(context)
        if "error" not in event and list(event.get("chosen_options") or ()) == [self.APPROVE]:
            if (sealed.digest, sealed.plan_try) != (plan_digest, plan_try):
                raise AirflowFailException(
                    f"rbak approval: the plan was made again while it waited for an answer (the approver saw try "
                    f"{plan_try}, SHA-256 {plan_digest}; it is now try {sealed.plan_try}, SHA-256 {sealed.digest}); the "
                    "approval does not count and nothing was imported or published. Clear approve to ask about this plan")
            refusal = self.rules().approval_refusal((user.get("id"), user.get("name")), triggering_user(context))
            if refusal:
                return self._ask_again(context, refusal, deadline, sealed)
        try:
            super().execute_complete(context, event)
        except HITLRejectException:
            error = rejection(sealed.plan, user.get("name") or user.get("id"), bool(event.get("timedout")),
                              self.response_timeout)
            raise AirflowFailException(f"rbak approval: {error}") from None
        approver = str(user.get("name") or user.get("id") or "")
        log.info("approved by %s: the plan of try %d, SHA-256 %s", approver, sealed.plan_try, sealed.digest)
        return {"approved": True, "asked": True, "approved_by": approver, "approval": authority.seal_approval(
            state_seal(), run_ref(context), sealed, authority.APPROVED, approver, context["ti"].try_number)}

    def _ask_again(self, context: Any, refusal: str, deadline: str | None, sealed: authority.SealedPlan) -> Any:
        """An Approve that does not count: wait for another approver until the first deadline (then it is over)."""
        until = dt.datetime.fromisoformat(deadline) if deadline else None
        now = dt.datetime.now(dt.timezone.utc)
        if until is not None and until <= now:
            raise AirflowFailException(f"rbak approval: the approval did not count ({refusal}) and the time to approve "
                                       "has run out; nothing was imported or published")
        log.warning("the approval does not count: %s; waiting for another approver%s", refusal,
                    f" until {until.isoformat()}" if until else "")
        self.response_timeout = until - now if until is not None else self.response_timeout
        return self._wait(context, until, sealed)
