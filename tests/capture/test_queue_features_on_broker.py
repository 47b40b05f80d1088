"""Queues real brokers have, captured on the real broker: read the safe way or left out untouched (issue 13)."""

from __future__ import annotations

import time
from urllib.parse import quote

import pika
import pytest

from airflow_rbak.broker.discovery import describe_queue
from airflow_rbak.broker.management import ManagementClient
from airflow_rbak.capture.checkpoints import CaptureCheckpoints
from airflow_rbak.capture.errors import CaptureInterruptedError, ConsumerTimeoutError
from airflow_rbak.capture.queue_capture import CaptureOptions, QueueCapture
from airflow_rbak.storage import open_storage
from tests.broker.behaviour import Behaviour, message_priorities
from tests.broker.helpers import PLAIN, declare, depth, publish
from tests.broker.messages import body_of, expected_prefix, sequence_of, split_record
from tests.reliability.faulty_storage import FaultyStorage
from tests.restore.helpers import read_queue

from .helpers import capture_queue, staged_json

pytestmark = pytest.mark.broker


def read_back(connection, vhost: str, queue: str) -> list[tuple[int, bool]]:
    """(message number, redelivered) of every ready message, by basic.get (no consumer: safe on auto-delete queues);
    all of them go back in order afterwards."""
    conn = pika.BlockingConnection(connection.pika_parameters(vhost))
    try:
        channel, seen = conn.channel(), []
        while (got := channel.basic_get(queue, auto_ack=False))[0] is not None:
            method, _props, body = got
            seen.append((int.from_bytes(body[:8], "big"), bool(method.redelivered)))
        if seen:
            channel.basic_nack(0, multiple=True, requeue=True)
        return seen
    finally:
        conn.close()


def assert_staged_exactly(storage, backup_id: str, vhost: str, queue: str, count: int, size: int, behaviour: Behaviour,
                          queue_type: str) -> None:
    """Every message staged byte-exact, in the order and with the header order this broker delivers them."""
    order = behaviour.delivery_order(queue_type, message_priorities(count))
    sort = behaviour.sorts_headers(queue_type)
    staged = [split_record(raw)[0] for raw in staged_json(storage, backup_id, vhost, queue)]
    assert len(staged) == count
    first_wrong = next((n for n, prefix in enumerate(staged)
                        if prefix != expected_prefix(order[n], size, queue, sorted_headers=sort)), None)
    assert first_wrong is None, f"staged record {first_wrong} is not message {order[first_wrong]}"


def test_an_auto_delete_queue_is_read_by_basic_get_and_still_exists_whole_afterwards(broker, behaviour, vhost):
    # Given an auto-delete queue holding messages (a consumer's cancel would delete it with them)
    conn = pika.BlockingConnection(broker.connection.pika_parameters(vhost))
    conn.channel().queue_declare("auto", auto_delete=True)
    conn.close()
    publish(broker.connection, vhost, "auto", 300, size=256)
    storage = open_storage("memory://")

    # When it is captured
    result = capture_queue(broker.connection, storage, "b1", vhost, "auto")

    # Then every message is staged byte-exact in order, and the queue still holds them all, in order
    assert (result.method, result.messages, result.left_out) == ("basic.get", 300, None)
    assert_staged_exactly(storage, "b1", vhost, "auto", 300, 256, behaviour, "classic")
    assert [n for n, _ in read_back(broker.connection, vhost, "auto")] == list(range(300))


def test_an_exclusive_queue_of_another_connection_is_left_out_untouched(broker, vhost):
    # Given an exclusive queue held open by an application's connection
    holder = pika.BlockingConnection(broker.connection.pika_parameters(vhost))
    try:
        channel = holder.channel()
        channel.queue_declare("mine", exclusive=True)
        for i in range(20):
            channel.basic_publish("", "mine", body_of(i, 64), PLAIN)
        storage = open_storage("memory://")

        # When a backup captures it
        result = capture_queue(broker.connection, storage, "b1", vhost, "mine")

        # Then it is left out with its reason, nothing staged, and its owner still holds every message, never delivered
        assert (result.method, result.messages) == ("left out", 0) and "exclusive" in result.left_out
        assert not list(storage.list("b1/"))
        assert channel.queue_declare("mine", passive=True).method.message_count == 20
        seen = [channel.basic_get("mine", auto_ack=True)[0].redelivered for _ in range(20)]
        assert seen == [False] * 20
    finally:
        holder.close()


def test_a_classic_single_active_consumer_queue_deeper_than_one_window_is_read_whole(broker, vhost):
    # Given a classic single-active-consumer queue deeper than the largest prefetch (65,535)
    count = 70_000
    declare(broker.connection, vhost, "sac", "classic", **{"x-single-active-consumer": True})
    publish(broker.connection, vhost, "sac", count, size=16, rich=False)
    storage = open_storage("memory://")

    # When it is captured
    result = capture_queue(broker.connection, storage, "b1", vhost, "sac")

    # Then every message is staged once, in order, and the queue is as it was
    assert (result.method, result.messages) == ("one consumer at a time", count)
    assert [sequence_of(raw) for raw in staged_json(storage, "b1", vhost, "sac")] == list(range(count))
    assert depth(broker.connection, vhost, "sac", count) == count


def test_a_quorum_single_active_consumer_queue_is_read_one_consumer_at_a_time_or_left_out_while_in_use(broker, behaviour, vhost):
    """Staged in the queue's delivery order (by priority on 4.x); on 4.0 the capture is allowed to raise delivery
    counts, which the default limit of 20 would otherwise refuse (tests/broker/behaviour.py)."""
    # Given a quorum single-active-consumer queue three windows deep
    count, window = 3_000, 1_000
    declare(broker.connection, vhost, "qsac", "quorum", **{"x-single-active-consumer": True})
    publish(broker.connection, vhost, "qsac", count, size=128)
    storage = open_storage("memory://")
    allowed = {"allow_delivery_count_increase": True} if behaviour.backup_leaves_out_by_default("quorum") else {}

    # When it is captured with no other consumer attached
    result = capture_queue(broker.connection, storage, "b1", vhost, "qsac", window=window, **allowed)

    # Then each consumer stepped aside for the next, every message was staged in order, and the queue is unchanged
    assert (result.method, result.messages, result.depth_after) == ("one consumer at a time", count, count)
    assert_staged_exactly(storage, "b1", vhost, "qsac", count, 128, behaviour, "quorum")
    assert depth(broker.connection, vhost, "qsac", count) == count

    # And while an application's consumer is attached, the queue is left out without a message received
    app = pika.BlockingConnection(broker.connection.pika_parameters(vhost))
    try:
        app_channel = app.channel()
        app_channel.basic_qos(prefetch_count=1)
        app_channel.basic_consume("qsac", lambda *_: None)
        _wait_for_consumers(broker, vhost, "qsac", 1)
        busy = capture_queue(broker.connection, storage, "b2", vhost, "qsac", **allowed)
        assert busy.method == "left out" and "attached consumer" in busy.left_out
        assert not list(storage.list("b2/"))
    finally:
        app.close()


@pytest.mark.rabbitmq("3.10", "4.0")
def test_a_delivery_limit_policy_added_after_discovery_leaves_the_queue_out_untouched(broker, behaviour, vhost, tmp_path):
    """RabbitMQ before 4.3 counts every return toward a quorum queue's limit (4.3 counts none: the next test)."""
    # Given a quorum queue that discovery saw without a delivery limit
    declare(broker.connection, vhost, "late", "quorum")
    publish(broker.connection, vhost, "late", 50, size=64)
    with ManagementClient(broker.connection) as client:
        seen_at_discovery = describe_queue(client, vhost, "late")
        version = client.version()
    assert seen_at_discovery.effective_policy == {}

    # When a delivery-limit policy is added before the capture starts
    broker.api("PUT", f"policies/{quote(vhost, safe='')}/limit",
               json={"pattern": "^late$", "definition": {"delivery-limit": 5}, "apply-to": "queues"})
    _wait_for_policy(broker, vhost, "late")
    storage = open_storage("memory://")
    checkpoints = CaptureCheckpoints(storage, "b1")
    result = QueueCapture(broker.connection, storage, checkpoints, CaptureOptions("b1")).capture(seen_at_discovery, version)

    # Then the capture read the policy itself and left the queue out before receiving a message (the queue in its
    # delivery order: by priority on 4.0)
    assert result.method == "left out" and "delivery limit of 5" in result.left_out
    order = behaviour.delivery_order("quorum", message_priorities(50))
    assert read_back(broker.connection, vhost, "late") == [(i, False) for i in order]


@pytest.mark.rabbitmq("4.3")
def test_on_4_3_a_delivery_limit_policy_added_after_discovery_is_read_by_the_capture_and_counts_no_return(broker, vhost):
    """RabbitMQ 4.3 counts a basic.nack's return in x-acquired-count, not toward the limit: the capture reads the
    policy added after discovery, takes every message and leaves each one's delivery count as it was."""
    # Given a quorum queue that discovery saw without a policy
    declare(broker.connection, vhost, "late", "quorum")
    publish(broker.connection, vhost, "late", 50, size=64)
    with ManagementClient(broker.connection) as client:
        seen_at_discovery = describe_queue(client, vhost, "late")
        version = client.version()
    assert seen_at_discovery.effective_policy == {}

    # When a delivery-limit policy of 1 is added before the capture starts, and the queue is captured twice
    broker.api("PUT", f"policies/{quote(vhost, safe='')}/limit",
               json={"pattern": "^late$", "definition": {"delivery-limit": 1}, "apply-to": "queues"})
    _wait_for_policy(broker, vhost, "late")
    storage = open_storage("memory://")
    results = [QueueCapture(broker.connection, storage, CaptureCheckpoints(storage, b), CaptureOptions(b)).capture(
        seen_at_discovery, version) for b in ("b1", "b2")]

    # Then both took every message (a return that counted would have dropped all 50 at the second), none counted
    assert [(r.method, r.messages, r.depth_after) for r in results] == [("consumers", 50, 50)] * 2
    views = read_queue(broker.connection, vhost, "late", "quorum", 50, broker_headers=True)
    assert [[k for k, _v in headers if k == "x-delivery-count"] for _b, _p, headers in views] == [[]] * 50


def test_a_max_length_queue_that_rejects_publishes_is_left_out(broker, vhost):
    declare(broker.connection, vhost, "bounded", "classic", **{"x-max-length": 100, "x-overflow": "reject-publish"})
    publish(broker.connection, vhost, "bounded", 10, size=32)

    result = capture_queue(broker.connection, open_storage("memory://"), "b1", vhost, "bounded")

    assert result.method == "left out" and "reject-publish" in result.left_out
    assert read_back(broker.connection, vhost, "bounded") == [(i, False) for i in range(10)]


def test_a_quorum_queue_reporting_depth_zero_while_it_holds_messages_is_never_backed_up_short(broker, behaviour, vhost, tmp_path):
    # Given a quorum queue of 2,000 messages whose leader stops answering (RabbitMQ 3.10 then reports its depth as 0
    # over AMQP, as it does for a busy leader), while the management API still shows what it holds
    count = 2_000
    declare(broker.connection, vhost, "q0", "quorum")
    publish(broker.connection, vhost, "q0", count, size=64)
    _wait_for_management_ready(broker, vhost, "q0", count)
    allowed = {"allow_delivery_count_increase": True} if behaviour.backup_leaves_out_by_default("quorum") else {}
    leader = f"element(1, amqqueue:get_pid(element(2, rabbit_amqqueue:lookup(rabbit_misc:r(<<\"{vhost}\">>, queue, <<\"q0\">>)))))"
    broker.eval(f"sys:suspend(whereis({leader})).")
    storage = open_storage(f"file://{tmp_path / 'store'}")
    try:
        assert depth(broker.connection, vhost, "q0") == 0  # the misreport this test is about

        # When it is captured: the capture must give up rather than complete with fewer messages than the queue holds
        with pytest.raises(CaptureInterruptedError):
            capture_queue(broker.connection, storage, "b1", vhost, "q0", idle_timeout=1.0,
                          inconclusive_checks=2, **allowed)
    finally:
        broker.eval(f"sys:resume(whereis({leader})).")

    # Then nothing was lost, and a re-run once the leader answers again completes with every message, in order
    assert depth(broker.connection, vhost, "q0", count, wait=60) == count
    result = capture_queue(broker.connection, storage, "b1", vhost, "q0", **allowed)
    assert (result.messages, result.depth_after) == (count, count)
    order = behaviour.delivery_order("quorum", message_priorities(count))  # by priority on 4.x
    assert [sequence_of(raw) for raw in staged_json(storage, "b1", vhost, "q0")] == order


class ShortConsumerTimeout:
    """The node's consumer_timeout at 3 s, checked every 0.5 s, for channels opened until :meth:`restore`."""

    ms = 3000

    def __init__(self, broker) -> None:
        self.broker = broker
        broker.eval(f"application:set_env(rabbit, consumer_timeout, {self.ms}), "
                    "application:set_env(rabbit, channel_tick_interval, 500).")

    def restore(self) -> None:
        self.broker.eval("application:set_env(rabbit, consumer_timeout, 1800000), "
                         "application:set_env(rabbit, channel_tick_interval, 60000).")


@pytest.fixture
def short_consumer_timeout(broker):
    setting = ShortConsumerTimeout(broker)
    try:
        yield setting
    finally:
        setting.restore()


@pytest.mark.parametrize("told", [True, False], ids=["timeout-known", "timeout-unknown"])
def test_a_capture_that_outlives_the_consumer_timeout_fails_clearly_and_loses_nothing(broker, behaviour, vhost, tmp_path,
                                                                                      short_consumer_timeout, told):
    """timeout-unknown needs the broker to enforce its timeout: RabbitMQ 3.10 closes a classic queue's channel; 4.3
    applies none to classic queues and cancels a quorum queue's consumer, taking its messages back (the channel stays
    open), so there the queue is a quorum one (tests/broker/behaviour.py)."""
    # Given a queue of 5,000 messages on a broker whose consumer timeout is 3 s
    count = 5_000
    queue_type = "classic" if told else behaviour.consumer_timeout_enforced_on()
    declare(broker.connection, vhost, "slow", queue_type)
    publish(broker.connection, vhost, "slow", count, size=64)
    allowed = {"allow_delivery_count_increase": True} if behaviour.backup_leaves_out_by_default(queue_type) else {}
    storage = FaultyStorage(open_storage(f"file://{tmp_path / 'store'}"))

    # And storage that stalls the first chunk: for 2.5 s when the capture knows the timeout (it must stop itself),
    # until the broker has taken its messages back (closing its channel or cancelling its consumer) when it does not
    def stall(key: str) -> None:
        if key.endswith("chunk-00000001.zst"):
            if told:
                time.sleep(2.5)
            else:
                depth(broker.connection, vhost, "slow", count, wait=120)

    storage.on_put = stall
    options = {"consumer_timeout_ms": short_consumer_timeout.ms} if told else allowed

    # When it is captured: a clear error naming the consumer timeout
    with pytest.raises(ConsumerTimeoutError, match="consumer_timeout"):
        capture_queue(broker.connection, storage, "b1", vhost, "slow", chunk_max_records=1000, **options)

    # Then no message was lost or reordered, and nothing is marked complete
    short_consumer_timeout.restore()  # for the reading back
    assert depth(broker.connection, vhost, "slow", count, wait=30) == count
    assert [n for n, _ in read_back(broker.connection, vhost, "slow")] == behaviour.delivery_order(queue_type, message_priorities(count))
    progress = CaptureCheckpoints(storage, "b1").get("b1", vhost, "slow")
    assert progress is None or not progress.completed


def _wait_for_consumers(broker, vhost: str, queue: str, expected: int, wait: float = 60.0) -> None:
    deadline = time.monotonic() + wait
    while broker.api("GET", f"queues/{quote(vhost, safe='')}/{queue}").json().get("consumers") != expected:
        assert time.monotonic() < deadline, f"queue {queue!r} never had {expected} consumers"
        time.sleep(0.2)


def _wait_for_policy(broker, vhost: str, queue: str, wait: float = 30.0) -> None:
    deadline = time.monotonic() + wait
    while not broker.api("GET", f"queues/{quote(vhost, safe='')}/{queue}").json().get("effective_policy_definition"):
        assert time.monotonic() < deadline, "the policy never applied"
        time.sleep(0.2)


def _wait_for_management_ready(broker, vhost: str, queue: str, expected: int, wait: float = 60.0) -> None:
    deadline = time.monotonic() + wait
    while broker.api("GET", f"queues/{quote(vhost, safe='')}/{queue}").json().get("messages_ready") != expected:
        assert time.monotonic() < deadline, "the management API never showed the queue's messages"
        time.sleep(0.5)
