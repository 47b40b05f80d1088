"""How captured messages go back, and whether that counts toward a quorum queue's delivery limit (no broker needed)."""

from __future__ import annotations

import pytest

from airflow_rbak.broker.discovery import QueueInfo
from airflow_rbak.capture.returns import ReturnPlan, return_plan
from tests.broker.test_discovery import quorum


@pytest.mark.parametrize(
    ("version", "limit", "counts"),
    [("3.10.8", 3, True), ("4.2.1", 20, True), ("4.3.0", 20, False)],
)
def test_returns_count_toward_the_limit_before_4_3(version, limit, counts):
    plan = return_plan(quorum(arg=3) if version.startswith("3") else quorum(), version)

    assert (plan.limit, plan.counts) == (limit, counts)
    # where a nack counts anyway, closing the channels returns far more cheaply (returns.py); from 4.3 it does not
    assert plan.method == ("close" if counts else "nack")
    # and a closed (or on 4.3 nacked) channel's consumers come back in tag order only up to 32 of them
    assert plan.consumers_per_channel == 32


def test_classic_queues_are_returned_by_closing_one_channel_and_never_count():
    plan = return_plan(QueueInfo("/", "c", "classic"), "3.10.8")

    assert plan == ReturnPlan("close", counts=False, limit=None, consumers_per_channel=None)
