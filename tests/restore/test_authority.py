"""A step after ``approve`` acts only on the sealed plan a sealed approval of the same run covers.

The pure rules of :mod:`airflow_rbak.restore.authority`; the same cases on a running Airflow, driven through its REST
API as a requester would, are ``tests/dags/test_rbak_restore_authority.py``.
"""

from __future__ import annotations

import copy

import pytest

from airflow_rbak.restore import RestorePlan, authority
from airflow_rbak.restore.authority import NotApprovedError, RunRef
from airflow_rbak.restore.plan import QueuePlan
from airflow_rbak.storage.sealed import StateSeal

SEAL = StateSeal(b"k" * 32)
RUN = RunRef("rbak_restore", "manual__1")
REQUEST = {"storage_url": "file:///b", "backup_id": "latest", "dry_run": False}
ORDERS = QueuePlan(source_vhost="shop", source_queue="orders", target_vhost="shop-restored", target_queue="orders",
                   queue_type="classic", records_total=5, records_in_window=5, segments=())
PLAN = RestorePlan(backup_id="daily-1", storage_url="file:///b", window_start=None, window_end=None, queues=(ORDERS,),
                   target_cluster="rabbit@new", target_cluster_id="id-1")
GROUPS = [[{"source_vhost": "shop", "source_queue": "orders"}]]


def _sealed_plan(plan: RestorePlan = PLAN, request: dict = REQUEST, plan_try: int = 1, run: RunRef = RUN) -> dict:
    return authority.seal_plan(SEAL, run, plan, request, GROUPS, plan_try)


def _approval(sealed_plan: dict, mode: str = authority.APPROVED, run: RunRef = RUN) -> dict:
    opened = authority.open_plan(SEAL, run, sealed_plan)
    return authority.seal_approval(SEAL, run, opened, mode, "colleague" if mode == authority.APPROVED else None, 1)


def test_the_approved_plan_is_the_one_a_step_acts_on():
    sealed = _sealed_plan()

    plan, approval = authority.authorize(SEAL, RUN, sealed, _approval(sealed), REQUEST)

    assert plan.plan == PLAN and plan.groups == (((ORDERS.source_vhost, ORDERS.source_queue),),)
    assert (approval.mode, approval.approved_by, approval.plan_try) == ("approved", "colleague", 1)


@pytest.mark.parametrize("missing", [None, {}])
def test_no_approval_is_no_approval_whatever_airflow_says_of_the_approve_task(missing):
    with pytest.raises(NotApprovedError, match=r"holds no approval: the approve task left none \(marked succeeded by "
                                               r"hand, or its result removed\); nothing was done"):
        authority.authorize(SEAL, RUN, _sealed_plan(), missing, REQUEST)


def test_a_plan_made_again_after_the_approval_is_not_covered_by_it_even_when_it_is_the_same_plan():
    approved = _approval(_sealed_plan(plan_try=1))

    for again in (_sealed_plan(plan_try=2), _sealed_plan(plan=PLAN.__class__(**{**PLAN.__dict__, "backup_id": "daily-2"}))):
        with pytest.raises(NotApprovedError, match=r"the plan was made again after the approval: approved by colleague "
                                                   r"at .* covers the plan of try 1 .*nothing was done"):
            authority.authorize(SEAL, RUN, again, approved, REQUEST)


def test_an_edited_plan_fails_its_seal():
    sealed = _sealed_plan()
    approval = _approval(sealed)
    edited = copy.deepcopy(sealed)
    edited["body"]["plan"]["queues"][0]["target_queue"] = "elsewhere"

    with pytest.raises(NotApprovedError, match=r"the plan of rbak_restore run 'manual__1' is not one this deployment "
                                               r"sealed for it \(bad MAC"):
        authority.authorize(SEAL, RUN, edited, approval, REQUEST)


def test_a_plan_or_an_approval_of_another_run_or_another_deployment_is_refused():
    other = RunRef("rbak_restore", "manual__2")
    sealed = _sealed_plan()

    with pytest.raises(NotApprovedError, match=r"the approval of .*'manual__1' is not one this deployment sealed"):
        authority.authorize(SEAL, RUN, sealed, _approval(_sealed_plan(run=other), run=other), REQUEST)
    with pytest.raises(NotApprovedError, match=r"the plan of .* is not one this deployment sealed"):
        authority.authorize(SEAL, RUN, _sealed_plan(run=other), _approval(sealed), REQUEST)
    with pytest.raises(NotApprovedError, match=r"bad MAC \(edited, or sealed with another deployment's key\)"):
        authority.authorize(StateSeal(b"x" * 32), RUN, sealed, _approval(sealed), REQUEST)


def test_a_step_given_other_settings_than_the_plan_was_made_from_refuses_naming_them():
    sealed = _sealed_plan()

    with pytest.raises(NotApprovedError, match=r"other settings than the approved plan was made from \(backup_id\)"):
        authority.authorize(SEAL, RUN, sealed, _approval(sealed), {**REQUEST, "backup_id": "daily-2"})


def test_a_dry_run_s_approval_covers_only_a_dry_run():
    dry = {**REQUEST, "dry_run": True}
    sealed = _sealed_plan(request=dry)
    assert authority.authorize(SEAL, RUN, sealed, _approval(sealed, authority.DRY_RUN), dry)[1].mode == "dry_run"

    sealed = _sealed_plan()
    with pytest.raises(NotApprovedError, match="was for a dry run, and this restore is not one"):
        authority.authorize(SEAL, RUN, sealed, _approval(sealed, authority.DRY_RUN), REQUEST)


def test_a_publish_task_acts_only_on_the_queues_the_plan_handed_to_its_map_index():
    plan = authority.open_plan(SEAL, RUN, _sealed_plan())

    authority.check_group(plan, 0, GROUPS[0])
    with pytest.raises(NotApprovedError, match=r"publish task 0 was given the queues shop/payments, which are not"):
        authority.check_group(plan, 0, [{"source_vhost": "shop", "source_queue": "payments"}])
    with pytest.raises(NotApprovedError, match=r"publish task 1 was given the queues shop/orders"):
        authority.check_group(plan, 1, GROUPS[0])  # a second task for the same queue would publish it twice
