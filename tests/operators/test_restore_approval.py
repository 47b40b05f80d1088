"""The approval step's own decisions, in process: when it asks nobody, and how an answer ends it.

The whole path (a real Airflow parking the task, answers through the REST API, a real broker) is
``tests/dags/test_rbak_restore_approval.py``; the timeout, which Airflow resolves as the ``Reject`` default
after a day, is only reachable here.
"""

from __future__ import annotations

import datetime as dt
import uuid
from types import SimpleNamespace

import pytest
from airflow.providers.standard.operators import hitl
from airflow.sdk.exceptions import AirflowFailException, TaskAwaitingInput

from airflow_rbak.airflow_settings import state_seal
from airflow_rbak.operators.restore_approval import RbakRestoreApprovalOperator
from airflow_rbak.restore import RestorePlan, authority

RUN = authority.RunRef("rbak_restore", "manual__2026-11-24")
PLAN = RestorePlan(backup_id="daily-7", storage_url="file:///backups", window_start=None, window_end=None, queues=(),
                   target_cluster="rabbit@new", target_cluster_id="id-1")


def _approval(**settings) -> RbakRestoreApprovalOperator:
    request = {"storage_url": "memory://", **settings}
    sealed = authority.seal_plan(state_seal(), RUN, PLAN, request, [], plan_try=1)
    return RbakRestoreApprovalOperator(task_id="approve", plan=sealed, restore_request=request,
                                       response_timeout=dt.timedelta(hours=24))


def _approved_by(result: dict) -> str | None:
    """Who the sealed approval in the task's result names (the seal checked), or a failure."""
    body = state_seal().open_envelope(authority.APPROVAL, RUN.binding, result["approval"])
    assert result["approved"] is True and body["run"] == [RUN.dag_id, RUN.run_id]
    return body["approved_by"] if body["mode"] == authority.APPROVED else body["mode"]


def _answer(option: str, user: str | None, timed_out: bool = False) -> dict:
    return {"chosen_options": [option], "params_input": {}, "responded_at": dt.datetime(2026, 11, 24, tzinfo=dt.timezone.utc),
            "responded_by_user": {"id": user, "name": user} if user else None, "timedout": timed_out}


@pytest.fixture
def asked(monkeypatch) -> list[dict]:
    """What the task asked Airflow to show (the Human-in-the-loop request it writes), one entry per request."""
    found: list[dict] = []
    monkeypatch.setattr(hitl, "upsert_hitl_detail", lambda **request: found.append(request))
    return found


def _context(triggered_by: str | None = "alice") -> dict:
    ti = SimpleNamespace(id=uuid.uuid4(), dag_id=RUN.dag_id, try_number=1, map_index=-1)
    return {"task_instance": ti, "ti": ti, "run_id": RUN.run_id,
            "dag_run": SimpleNamespace(triggering_user_name=triggered_by)}


def _shown(operator: RbakRestoreApprovalOperator) -> dict:
    """The digest and try of the plan the operator holds, as its wait would have carried them."""
    return {"plan_digest": operator.plan["body"]["digest"], "plan_try": operator.plan["body"]["plan_try"]}


def _asked(operator: RbakRestoreApprovalOperator, context: dict) -> dict:
    """What ``execute`` parks with: the kwargs ``execute_complete`` is resumed with (deadline, plan digest and try)."""
    with pytest.raises(TaskAwaitingInput) as parked:
        operator.execute(context)
    return parked.value.kwargs


@pytest.mark.parametrize(("settings", "reason"), [({"dry_run": True}, "dry run: nothing is imported or published"),
                                                  ({}, "skip_approval is set")])
def test_a_dry_run_or_skip_approval_where_allowed_goes_on_without_asking(settings, reason, monkeypatch):
    monkeypatch.setenv("AIRFLOW__RBAK__ALLOW_SKIP_APPROVAL", "True")
    operator = _approval(**settings)
    operator.skip_approval = not settings  # as the DAG renders {{ params.skip_approval }}

    result = operator.execute(_context())
    assert {k: result[k] for k in ("approved", "asked", "reason")} == {"approved": True, "asked": False, "reason": reason}
    # and the approval is sealed as not asked, saying why
    assert _approved_by(result) == ("dry_run" if settings else "skip_approval")


def test_approve_goes_on_and_reject_or_no_answer_fails_without_retries_saying_nothing_changed(asked):
    operator = _approval()
    shown = _asked(operator, _context(None))

    assert _approved_by(operator.execute_complete(_context(None), _answer("Approve", "alice"), **shown)) == "alice"
    with pytest.raises(AirflowFailException, match=r"backup 'daily-7' rejected: the plan was rejected by bob; nothing was "
                                                   r"imported or published"):
        operator.execute_complete(_context(None), _answer("Reject", "bob"), **shown)
    with pytest.raises(AirflowFailException, match=r"nobody approved the plan within 24 hours \(a timeout counts as a "
                                                   r"rejection\); nothing was imported or published"):
        operator.execute_complete(_context(None), _answer("Reject", None, timed_out=True), **shown)


def test_an_approval_covers_only_the_plan_shown_and_a_plan_made_again_while_waiting_does_not_count(asked):
    # Given a restore waiting for approval of the plan of try 1
    operator = _approval()
    shown = _asked(operator, _context(None))
    assert f"SHA-256 `{shown['plan_digest']}`" in asked[0]["body"]

    # When the plan task runs again (cleared) and seals another plan while the approver answers
    operator.plan = authority.seal_plan(state_seal(), RUN, PLAN, operator.restore_request, [], plan_try=2)

    # Then the approval does not count for it
    with pytest.raises(AirflowFailException, match=r"the plan was made again while it waited for an answer .*try 1.* now "
                                                   r"try 2.*nothing was imported or published"):
        operator.execute_complete(_context(None), _answer("Approve", "bob"), **shown)


def test_a_plan_that_is_not_sealed_for_this_run_is_refused_before_anyone_is_asked(asked):
    operator = _approval()
    operator.plan = {**operator.plan, "body": {**operator.plan["body"], "plan_try": 9}}  # an edited XCom

    with pytest.raises(AirflowFailException, match=r"the plan of rbak_restore run .* is not one this deployment sealed"):
        operator.execute(_context())
    assert asked == []


def test_no_answer_in_time_is_a_rejection_by_default():
    operator = _approval()

    assert (operator.defaults, operator.response_timeout) == (["Reject"], dt.timedelta(hours=24))


def test_skip_approval_without_the_administrator_s_option_fails_at_once_naming_it(asked):
    # Given the default [rbak] allow_skip_approval (off), and a run that asks to skip the approval
    operator = _approval()
    operator.skip_approval = True

    # Then the task fails without retries, asking nobody, saying which option allows it
    with pytest.raises(AirflowFailException, match=r"skip_approval is set, but \[rbak\] allow_skip_approval is off.*"
                                                   r"nothing was imported or published"):
        operator.execute(_context())
    assert asked == []
    # a dry run changes nothing, so it never waits, whatever the option says
    dry = _approval(dry_run=True)
    dry.skip_approval = True
    assert dry.execute(_context())["asked"] is False


def test_restore_approvers_are_assigned_in_airflow_without_the_user_who_triggered_the_run(asked, monkeypatch):
    monkeypatch.setenv("AIRFLOW__RBAK__RESTORE_APPROVERS", "alice bob")

    # When alice's restore asks for approval
    with pytest.raises(TaskAwaitingInput) as parked:
        _approval().execute(_context("alice"))

    # Then Airflow is told that only bob may answer (it refuses anyone else's answer), and the deadline travels along
    assert asked[0]["assigned_users"] == [{"id": "bob", "name": "bob"}]
    deadline = dt.datetime.fromisoformat(parked.value.kwargs["deadline"])
    assert dt.timedelta(hours=23) < deadline - dt.datetime.now(dt.timezone.utc) <= dt.timedelta(hours=24)


def test_with_nobody_left_to_approve_the_task_fails_before_asking(asked, monkeypatch):
    monkeypatch.setenv("AIRFLOW__RBAK__RESTORE_APPROVERS", "alice")

    with pytest.raises(AirflowFailException, match=r"restore_approvers names only 'alice', who triggered this run"):
        _approval().execute(_context("alice"))
    assert asked == []


def test_an_approval_by_the_trigger_user_does_not_count_and_the_task_asks_again_until_the_same_deadline(asked):
    operator = _approval()
    deadline = dt.datetime.now(dt.timezone.utc) + dt.timedelta(hours=2)

    # When alice, who triggered the run, approves it
    with pytest.raises(TaskAwaitingInput) as parked:
        operator.execute_complete(_context("alice"), _answer("Approve", "alice"), deadline.isoformat(),
                                  **_shown(operator))

    # Then the task asks again (Airflow clears the stored answer) and waits at most until the first deadline
    assert len(asked) == 1
    assert parked.value.kwargs["deadline"] == deadline.isoformat()
    assert parked.value.timeout <= dt.timedelta(hours=2)
    # and bob's approval counts; alice's rejection counts too (it changes nothing)
    shown = {k: parked.value.kwargs[k] for k in ("plan_digest", "plan_try")}
    assert _approved_by(operator.execute_complete(_context("alice"), _answer("Approve", "bob"), **shown)) == "bob"
    with pytest.raises(AirflowFailException, match="rejected by alice"):
        _approval().execute_complete(_context("alice"), _answer("Reject", "alice"))


def test_an_approval_by_the_trigger_user_after_the_deadline_ends_the_wait(asked):
    past = (dt.datetime.now(dt.timezone.utc) - dt.timedelta(seconds=1)).isoformat()

    with pytest.raises(AirflowFailException, match=r"the approval did not count \(alice triggered this run.*time to "
                                                   r"approve has run out; nothing was imported or published"):
        operator = _approval()
        operator.execute_complete(_context("alice"), _answer("Approve", "alice"), past, **_shown(operator))
    assert asked == []


def test_the_administrator_may_let_the_trigger_user_approve(asked, monkeypatch):
    monkeypatch.setenv("AIRFLOW__RBAK__APPROVAL_BY_TRIGGER_USER_ALLOWED", "True")

    operator = _approval()
    assert _approved_by(operator.execute_complete(_context("alice"), _answer("Approve", "alice"), **_shown(operator))) == "alice"
