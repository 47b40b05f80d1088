"""The queues of a publish task side by side (``publish_threads``): every queue attempted whatever another does, the
outcomes in the group's order; a recovery to a point in time one at a time, stopping at the first failure."""

from __future__ import annotations

import threading

import pytest

from airflow_rbak.exceptions import ConfigurationError
from airflow_rbak.operators.restore import publish_tasks
from airflow_rbak.restore.queue_pool import publish_each
from airflow_rbak.restore.request import RestoreRequest


def test_a_failed_queue_stops_none_of_the_others_and_outcomes_keep_the_group_order():
    # Given six queues, three at a time, where q2's publish fails once all three threads are inside publish
    barrier, seen = threading.Barrier(3, timeout=60), []

    def publish(name: str) -> str:
        if name in ("q0", "q1", "q2"):
            barrier.wait()  # proves three ran at once: this returns only when three threads are here together
        seen.append(name)
        if name == "q2":
            raise RuntimeError("q2 broke")
        return name.upper()

    # When they are published
    outcomes = publish_each([f"q{n}" for n in range(6)], publish, 3)

    # Then every queue was attempted, and each outcome is its queue's, in order
    assert sorted(seen) == [f"q{n}" for n in range(6)]
    assert [(o.queue, o.result, str(o.error) if o.error else None, o.started) for o in outcomes] == [
        ("q0", "Q0", None, True), ("q1", "Q1", None, True), ("q2", None, "q2 broke", True),
        ("q3", "Q3", None, True), ("q4", "Q4", None, True), ("q5", "Q5", None, True)]


def test_in_order_publishes_one_at_a_time_and_starts_nothing_after_a_failure():
    running, most, order = [0], [0], []

    def publish(name: str) -> str:
        running[0] += 1
        most[0] = max(most[0], running[0])
        order.append(name)
        running[0] -= 1
        if name == "b":
            raise RuntimeError("b broke")
        return name

    outcomes = publish_each(["a", "b", "c"], publish, 8, in_order=True)

    assert order == ["a", "b"] and most[0] == 1
    assert [(o.queue, o.result, o.error is not None, o.started) for o in outcomes] == [
        ("a", "a", False, True), ("b", None, True, True), ("c", None, False, False)]


@pytest.mark.parametrize(("queues", "max_tasks", "threads", "tasks"), [
    (10, 256, 4, 3),      # groups of up to four: 4, 3, 3
    (10, 256, 1, 10),     # one task per queue, as before publish_threads
    (10, 2, 4, 2),        # max_publish_tasks still bounds them: bigger groups
    (6, 1, 3, 1),
    (3, 256, 32, 1),
    (0, 256, 4, 1),
    (5, None, 1, None),   # no grouping asked at all: one per queue
])
def test_the_plan_maps_one_publish_task_per_publish_threads_queues_within_max_publish_tasks(queues, max_tasks, threads,
                                                                                              tasks):
    assert publish_tasks(queues, max_tasks, threads) == tasks


@pytest.mark.parametrize("bad", [0, 33, -1, True, 2.5, "4"])
def test_publish_threads_is_an_integer_from_1_to_32(bad):
    with pytest.raises(ConfigurationError, match="publish_threads must be an integer 1-32"):
        RestoreRequest(storage_url="file:///tmp/x", publish_threads=bad)
    assert RestoreRequest(storage_url="file:///tmp/x").publish_threads == 1
