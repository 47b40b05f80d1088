"""The approval step's own decisions, in process: when it asks nobody, and how an answer ends it.

The whole path (a real Airflow parking the task, answers through the REST API, a real broker) is
``tests/dags/test_rbak_restore_approval.py``; the timeout, which Airflow resolves as the ``Reject`` default
after a day, is only reachable here.
"""

from __future__ import annotations

import datetime as dt

import pytest
from airflow.sdk.exceptions import AirflowFailException

from airflow_rbak.operators.restore_approval import RbakRestoreApprovalOperator
from airflow_rbak.restore import RestorePlan

PLAN = RestorePlan(backup_id="daily-7", storage_url="file:///backups", window_start=None, window_end=None, queues=(),
                   target_cluster="rabbit@new", target_cluster_id="id-1").to_json()


def _approval(**settings) -> RbakRestoreApprovalOperator:
    return RbakRestoreApprovalOperator(task_id="approve", plan=PLAN, restore_request={"storage_url": "memory://", **settings},
                                       response_timeout=dt.timedelta(hours=24))


def _answer(option: str, user: str | None, timed_out: bool = False) -> dict:
    return {"chosen_options": [option], "params_input": {}, "responded_at": dt.datetime(2026, 11, 24, tzinfo=dt.timezone.utc),
            "responded_by_user": {"id": user, "name": user} if user else None, "timedout": timed_out}


@pytest.mark.parametrize(("settings", "reason"), [({"dry_run": True}, "dry run: nothing is imported or published"),
                                                  ({}, "skip_approval is set")])
def test_a_dry_run_or_skip_approval_goes_on_without_asking(settings, reason):
    operator = _approval(**settings)
    operator.skip_approval = not settings  # as the DAG renders {{ params.skip_approval }}

    assert operator.execute({}) == {"approved": True, "asked": False, "reason": reason}


def test_approve_goes_on_and_reject_or_no_answer_fails_without_retries_saying_nothing_changed():
    operator = _approval()

    assert operator.execute_complete({}, _answer("Approve", "alice"))["chosen_options"] == ["Approve"]
    with pytest.raises(AirflowFailException, match=r"backup 'daily-7' rejected: the plan was rejected by bob; nothing was "
                                                   r"imported or published"):
        operator.execute_complete({}, _answer("Reject", "bob"))
    with pytest.raises(AirflowFailException, match=r"nobody approved the plan within 24 hours \(a timeout counts as a "
                                                   r"rejection\); nothing was imported or published"):
        operator.execute_complete({}, _answer("Reject", None, timed_out=True))


def test_no_answer_in_time_is_a_rejection_by_default():
    operator = _approval()

    assert (operator.defaults, operator.response_timeout) == (["Reject"], dt.timedelta(hours=24))
