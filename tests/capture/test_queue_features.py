"""The queue-feature table decides, per queue, how it is read or why it is left out (no broker needed)."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from airflow_rbak.broker.discovery import QueueInfo
from airflow_rbak.capture.capture_options import Deadline, drained_by_others
from airflow_rbak.capture.queue_features import FEATURES, CaptureMethod, Facts, consumer_timeout_ms, decide
from tests.broker.test_discovery import quorum

V310 = Facts("3.10.8")


def queue(queue_type="classic", *, policy=None, **fields) -> QueueInfo:
    arguments = fields.pop("arguments", {})
    return QueueInfo("/", "q", queue_type, arguments=arguments, effective_policy=policy or {}, **fields)


@pytest.mark.parametrize(
    ("info", "method"),
    [
        (queue(), CaptureMethod.CONSUMERS),
        (queue("quorum"), CaptureMethod.CONSUMERS),
        (queue("stream"), CaptureMethod.STREAM),
        (queue("stream", policy={"expires": 60000, "max-length": 5, "overflow": "reject-publish"}), CaptureMethod.STREAM),
        (queue(auto_delete=True), CaptureMethod.GET),
        (queue(arguments={"x-single-active-consumer": True}), CaptureMethod.ONE_CONSUMER_AT_A_TIME),
        (queue(arguments={"x-single-active-consumer": True}, consumers=1), CaptureMethod.GET),
        (queue("quorum", arguments={"x-single-active-consumer": True}), CaptureMethod.ONE_CONSUMER_AT_A_TIME),
        (queue(arguments={"x-max-length": 10}), CaptureMethod.CONSUMERS),  # drop-head: the queue ends as it would have
        (queue(arguments={"x-message-ttl": 1000, "x-dead-letter-exchange": "dlx"}), CaptureMethod.CONSUMERS),
    ],
)
def test_queues_that_can_be_read_safely_are_read_the_safe_way(info, method):
    decision = decide(info, V310)
    assert (decision.method, decision.reason) == (method, None)


@pytest.mark.parametrize(
    ("info", "reason"),
    [
        (queue(exclusive=True, auto_delete=True), "exclusive"),
        (queue(arguments={"x-expires": 60000}), "expiry timer"),
        (queue(policy={"expires": 60000}), "expiry timer"),
        (queue("quorum", policy={"delivery-limit": 5}), "delivery limit of 5"),
        (queue(arguments={"x-max-length": 10, "x-overflow": "reject-publish"}), "reject-publish"),
        (queue(policy={"max-length-bytes": 10, "overflow": "reject-publish-dlx"}), "reject-publish-dlx"),
        (queue("quorum", arguments={"x-single-active-consumer": True}, consumers=1), "attached consumer"),
    ],
)
def test_queues_that_cannot_be_read_without_changing_them_are_left_out_with_a_reason(info, reason):
    decision = decide(info, V310)
    assert decision.left_out and reason in decision.reason


def test_an_argument_wins_over_the_policy_as_rabbitmq_applies_them():
    assert decide(queue(arguments={"x-overflow": "drop-head", "x-max-length": 5}, policy={"overflow": "reject-publish"}),
                  V310).method is CaptureMethod.CONSUMERS


def test_the_consumer_timeout_is_the_queues_own_where_it_sets_one():
    assert consumer_timeout_ms(queue(), 1_800_000) == 1_800_000
    assert consumer_timeout_ms(queue(arguments={"x-consumer-timeout": 60_000}), 1_800_000) == 60_000
    assert consumer_timeout_ms(queue(policy={"consumer-timeout": 90_000}), 1_800_000) == 90_000


def test_every_feature_says_what_the_backup_does_and_why():
    assert len({f.name for f in FEATURES}) == len(FEATURES)
    assert all(f.action and f.why and f.why[0].islower() for f in FEATURES)


def test_a_deadline_leaves_a_margin_for_the_return_and_stops_a_capture_that_cannot_finish_in_time():
    assert Deadline(1_800_000).budget_s == 1620.0
    assert Deadline(4_000).budget_s == 2.0
    deadline = Deadline(1_800_000)
    assert deadline.exceeded(10, 100) is None  # not started: nothing held yet
    deadline.started = time.monotonic() - 500  # 500 s for 10 of 100 000 messages: 5,000,000 s projected
    assert "would need about" in deadline.exceeded(10, 100_000)
    assert deadline.exceeded(100_000, 100_000) is None
    deadline.started = time.monotonic() - 1700
    assert "held its messages" in deadline.exceeded(99_000, 100_000)


@pytest.mark.parametrize(
    ("amqp", "counts", "queue_type", "held", "drained"),
    [
        (0, None, "classic", 5, True),  # a classic queue's AMQP count is exact
        (3, None, "classic", 5, False),
        (0, None, "quorum", 5, False),  # no management figures: cannot tell
        (0, (0, 5), "quorum", 5, True),  # the API agrees and already counts what this capture holds
        (0, (0, 0), "quorum", 5, False),  # sampled before this capture held anything: stale
        (0, (40, 5), "quorum", 5, False),  # 3.10's 0 for a busy quorum queue
    ],
)
def test_a_depth_of_zero_alone_never_shortens_a_quorum_capture(amqp, counts, queue_type, held, drained):
    assert drained_by_others(amqp, counts, queue_type, held) is drained


def feature_rows() -> list[list[str]]:
    """The operations guide's 'Queue features' table, row by row, each as its cells."""
    doc = (Path(__file__).resolve().parents[2] / "docs" / "operations.md").read_text()
    section = doc.split("\n## Queue features\n", 1)[1].split("\n## ", 1)[0]
    rows = [line for line in section.splitlines() if line.startswith("| ") and not line.startswith("| queue feature")]
    return [[cell.strip() for cell in row.strip("|").split(" | ")] for row in rows]


def test_the_operations_guide_shows_the_table_the_code_decides_from():
    assert [row[:3] for row in feature_rows()] == [[f.name, f.action, f.why] for f in FEATURES]


def test_a_counting_limit_leaves_the_queue_out_unless_allowed_and_the_reason_says_how_to_proceed():
    info, version = quorum(arg=3), "3.10.8"

    refused = decide(info, Facts(version))
    assert refused.left_out and "delivery limit of 3" in refused.reason and "allow_delivery_count_increase=True" in refused.reason
    assert decide(info, Facts(version, allow_delivery_count_increase=True)).method is CaptureMethod.CONSUMERS
    assert not decide(quorum(), Facts(version)).left_out  # no limit: nothing to refuse


@pytest.mark.parametrize("limit", [0, 1, 2])
def test_a_limit_of_two_or_less_leaves_the_queue_out_even_when_allowed(limit):
    """An allowed capture stops at the first message whose next capture's return would reach the limit (returns.py):
    under 2 or less that is the first message of all, so reading it would only raise counts."""
    for allowed in (False, True):
        decision = decide(quorum(arg=limit), Facts("4.0.5", allow_delivery_count_increase=allowed))
        assert decision.left_out and f"delivery limit of {limit}" in decision.reason
        assert "even with allow_delivery_count_increase" in decision.reason and "raise the limit above 2" in decision.reason
    assert not decide(quorum(arg=2), Facts("4.3.0")).left_out  # 4.3 counts no return
