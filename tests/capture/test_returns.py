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


@pytest.mark.parametrize("limit", [3, 4, 20])
def test_a_capture_stops_before_any_return_brings_a_message_to_the_limit(limit):
    """Stop at the first message with c + 2 >= L: its return takes it to c + 1 <= L - 1, never to L (where its
    application would have no retry left), and the next capture, which cannot see a count before receiving, is then
    left out (limit_stops.py)."""
    plan = return_plan(quorum(arg=limit), "4.0.5")

    assert [c for c in range(limit + 2) if not plan.stops_at(c)] == list(range(limit - 2))
    # so repeated captures of fresh messages take limit - 2 of them and leave every message at limit - 1
    assert not plan.captures_nothing


@pytest.mark.parametrize("limit", [0, 1, 2])
def test_under_a_limit_of_two_or_less_a_capture_could_take_nothing(limit):
    # a message never returned (count 0) would already stop it: the queue is left out before consuming (queue_features)
    assert return_plan(quorum(arg=limit), "4.0.5").captures_nothing


def test_where_returns_do_not_count_no_capture_stops():
    for plan in (return_plan(quorum(arg=3), "4.3.0"), return_plan(QueueInfo("/", "c", "classic"), "3.10.8")):
        assert not plan.stops_at(1_000) and not plan.captures_nothing
