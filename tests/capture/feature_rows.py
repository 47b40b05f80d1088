"""The steps every row of the queue-features table takes on the broker (tests/capture/test_queue_feature_rows.py).

Each row sets its feature on a queue named ``row`` holding COUNT messages, reads the source before the capture
(:func:`fresh`), captures it, and reads it again: a queue left out is exactly as before (:func:`left_out_and_kept`),
and a captured one is staged whole and in order and changed only as one return changes it on this broker
(:func:`captured_and_kept`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from airflow_rbak.capture.capture_options import CaptureResult
from airflow_rbak.storage import open_storage
from airflow_rbak.storage.base import Storage
from tests.broker.behaviour import Behaviour
from tests.broker.helpers import publish
from tests.broker.messages import body_of, sequence_of

from .helpers import capture_queue, staged_json
from .source_state import SourceState, declare_with, policy_refused, source_state

COUNT, SIZE = 12, 64
BY_DECLARATION = ("declaration", "policy")


def set_feature(broker, behaviour: Behaviour, vhost: str, queue_type: str, how: str, settings: Mapping[str, object],
                arguments: Mapping[str, object] | None = None, **flags: bool) -> bool:
    """Queue ``row`` with ``settings`` (policy keys) set ``how`` (and ``arguments`` as declared), holding COUNT messages
    0..COUNT-1. False, once the broker is seen to refuse it, where no (operator) policy can set them on this broker."""
    if how != "argument":
        operator = how == "operator-policy"
        if not all(behaviour.policy_accepts(key, operator) for key in settings):
            assert policy_refused(broker, vhost, settings, operator), (
                f"RabbitMQ {behaviour.version} accepts {'an operator' if operator else 'a'} policy of {dict(settings)}: "
                "test that row by it (tests/broker/behaviour.py)")
            return False
    declare_with(broker, vhost, "row", queue_type, how, settings, arguments, **flags)
    publish(broker.connection, vhost, "row", COUNT, SIZE, rich=False)
    return True


def fresh(state: SourceState, order: list[int] | None = None, counters: Mapping[str, int] | None = None) -> SourceState:
    """The state before a capture: the messages in publish order, never delivered (no counters but ``counters``, as
    this broker sends them on a first delivery), bodies as published."""
    assert state.order == (order if order is not None else list(range(COUNT)))
    first = tuple(sorted((counters or {}).items()))
    assert [(m.redelivered, m.counters, m.body) for m in state.messages] == [(False, first, body_of(m.number, SIZE))
                                                                             for m in state.messages]
    return state


def assert_kept(before: SourceState, after: SourceState, behaviour: Behaviour, queue_type: str, captured: bool) -> None:
    """Same depth, order and bodies; each message's counters changed only by the returns: the first reading's, and
    the capture's if it read the queue."""
    returns = 2 if captured else 1
    assert (after.depth, after.order) == (before.depth, before.order)
    assert [m.body for m in after.messages] == [m.body for m in before.messages]
    assert after.counters() == [behaviour.counters_after_returns(queue_type, c, returns) for c in before.counters()]
    assert all(m.redelivered for m in after.messages)  # given back once at least (by the first reading)


def assert_staged_in_order(storage, vhost: str, order: list[int]) -> None:
    assert [sequence_of(raw) for raw in staged_json(storage, "b1", vhost, "row")] == order


def allowed(behaviour: Behaviour, queue_type: str) -> dict[str, Any]:
    """What a capture of this queue type needs on this broker: 4.0 counts returns toward a default limit of 20."""
    return {"allow_delivery_count_increase": True} if behaviour.backup_leaves_out_by_default(queue_type) else {}


def sequence_of_body(body: bytes) -> int:
    return int.from_bytes(body[:8], "big")


def captured_and_kept(broker, behaviour: Behaviour, vhost: str, queue_type: str, before: SourceState, method: str,
                      storage: Storage | None = None, by_consumer: bool = False, **options: Any) -> CaptureResult:
    """Given the row's queue read as ``before``, when it is captured as backup ``b1`` (with ``options``), then
    :func:`assert_captured_and_kept`."""
    storage = storage or open_storage("memory://")

    result = capture_queue(broker.connection, storage, "b1", vhost, "row", **options)

    assert_captured_and_kept(broker, behaviour, vhost, queue_type, before, method, storage, result, by_consumer)
    return result


def assert_captured_and_kept(broker, behaviour: Behaviour, vhost: str, queue_type: str, before: SourceState, method: str,
                             storage: Storage, result: CaptureResult, by_consumer: bool = False) -> None:
    """The capture read the row's queue by ``method``, staged every message in the order it was read, and the queue
    holds them all again, changed only by the returns."""
    assert (result.method, result.messages, result.depth_after) == (method, COUNT, COUNT)
    assert_staged_in_order(storage, vhost, before.order)
    after = source_state(broker.connection, vhost, "row", by_consumer=by_consumer)
    assert_kept(before, after, behaviour, queue_type, captured=True)


def left_out_and_kept(broker, behaviour: Behaviour, vhost: str, queue_type: str, before: SourceState, reason: str) -> None:
    """Given the row's queue read as ``before``, when a capture is asked for, then it is left out with ``reason`` in
    what it says, and the queue is as the first reading's return left it."""
    result = capture_queue(broker.connection, open_storage("memory://"), "b1", vhost, "row")

    assert result.method == "left out" and reason in result.left_out
    assert_kept(before, source_state(broker.connection, vhost, "row"), behaviour, queue_type, captured=False)


def assert_whole_one_below(after: SourceState, limit: int) -> None:
    """Every message still there, in order, byte-exact, each one below the delivery limit."""
    assert (after.order, [m.body for m in after.messages]) == (list(range(COUNT)), [body_of(i, SIZE) for i in range(COUNT)])
    assert {c.get("x-delivery-count") for c in after.counters()} == {limit - 1}
