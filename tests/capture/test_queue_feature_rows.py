"""The queue-features table (docs/operations.md, 'Queue features'), row by row on the real broker (issue 40).

Each row's feature is set once by the queue's argument and once by a policy (and by an operator policy where
RabbitMQ lets one set it); where RabbitMQ lets no policy set it, the test shows that the broker refuses such a
policy. Before and after the capture the source's depth, order and per-message counters are read
(tests/capture/source_state.py): a queue left out is exactly as before, and a captured one changed only as one
return changes it on this broker (tests/broker/behaviour.py). The table's last column names these tests; a test
keeps that column true (tests/capture/test_queue_features.py).
"""

from __future__ import annotations

import time

import pika
import pytest

from airflow_rbak.capture.errors import ConsumerTimeoutError, DeliveryLimitRiskError
from airflow_rbak.codec.layout import delivery_limit_stop_key
from airflow_rbak.storage import open_storage
from tests.broker.helpers import PLAIN, depth, publish
from tests.broker.messages import body_of
from tests.reliability.faulty_storage import FaultyStorage

from .feature_rows import (
    BY_DECLARATION,
    COUNT,
    SIZE,
    allowed,
    assert_captured_and_kept,
    assert_kept,
    assert_staged_in_order,
    assert_whole_one_below,
    captured_and_kept,
    fresh,
    left_out_and_kept,
    sequence_of_body,
    set_feature,
)
from .helpers import capture_queue
from .source_state import HOW, declare_with, read_state, source_state, state_without_waiting, wait_for_consumers, wait_for_ready
from .test_queue_features_on_broker import ShortConsumerTimeout
from .test_stream_capture import capture_stream

pytestmark = pytest.mark.broker

# --- rows that leave a queue out -------------------------------------------------------------------------------


@pytest.mark.parametrize("how", BY_DECLARATION)
def test_row_exclusive(broker, behaviour, vhost, how):
    """Only the declaring connection can read it: left out, its owner's messages untouched."""
    if how == "policy":
        assert not set_feature(broker, behaviour, vhost, "classic", how, {"exclusive": True})
        return
    holder = pika.BlockingConnection(broker.connection.pika_parameters(vhost))
    try:
        channel = holder.channel()
        channel.queue_declare("row", exclusive=True)
        for i in range(COUNT):
            channel.basic_publish("", "row", body_of(i, SIZE), PLAIN)
        before = fresh(read_state(channel, "row"))
        wait_for_ready(channel, "row", COUNT)
        result = capture_queue(broker.connection, open_storage("memory://"), "b1", vhost, "row")
        assert result.method == "left out" and "exclusive" in result.left_out
        assert_kept(before, read_state(channel, "row"), behaviour, "classic", captured=False)
    finally:
        holder.close()


@pytest.mark.parametrize("how", HOW)
def test_row_expires(broker, behaviour, vhost, how):
    if not set_feature(broker, behaviour, vhost, "classic", how, {"expires": 600_000}):
        return
    before = fresh(source_state(broker.connection, vhost, "row"))

    left_out_and_kept(broker, behaviour, vhost, "classic", before, "expiry timer")


@pytest.mark.parametrize("how", HOW)
def test_row_delivery_limit_on_a_quorum_queue(broker, behaviour, vhost, how):
    """Before 4.3: left out, then with allow_delivery_count_increase captured, raising x-delivery-count by one.
    4.3: captured without it, x-delivery-count untouched (the return raises x-acquired-count)."""
    if not set_feature(broker, behaviour, vhost, "quorum", how, {"delivery-limit": 5}):
        return
    before = fresh(source_state(broker.connection, vhost, "row"), counters=behaviour.counters_on_first_delivery("quorum", True))
    storage = open_storage("memory://")

    if behaviour.returns_count("quorum"):
        refused = capture_queue(broker.connection, storage, "b0", vhost, "row")
        assert refused.method == "left out" and "delivery limit of 5" in refused.left_out
        assert "allow_delivery_count_increase" in refused.left_out and not list(storage.list("b0/"))
    captured_and_kept(broker, behaviour, vhost, "quorum", before, "consumers", storage, **(
        {"allow_delivery_count_increase": True} if behaviour.returns_count("quorum") else {}))


@pytest.mark.parametrize(("how", "overflow"), [("argument", "reject-publish"), ("policy", "reject-publish-dlx"),
                                               ("operator-policy", "reject-publish")])
def test_row_max_length_rejecting_publishes(broker, behaviour, vhost, how, overflow):
    """By operator policy: its max-length over the queue's own x-overflow (an operator policy cannot set overflow on
    every version)."""
    settings: dict[str, object] = {"max-length": 100} if how == "operator-policy" else {"max-length": 100, "overflow": overflow}
    arguments = {"x-overflow": overflow} if how == "operator-policy" else None
    if not set_feature(broker, behaviour, vhost, "classic", how, settings, arguments):
        return
    before = fresh(source_state(broker.connection, vhost, "row"))

    left_out_and_kept(broker, behaviour, vhost, "classic", before, overflow)


# --- rows that choose how a queue is read ----------------------------------------------------------------------


@pytest.mark.parametrize("how", ["argument", "policy"])
def test_row_single_active_consumer_quorum(broker, behaviour, vhost, how):
    """Read one consumer at a time (its being left out while another consumer is attached:
    test_queue_features_on_broker.py::test_a_quorum_single_active_consumer_queue_is_read_one_consumer_at_a_time_or_left_out_while_in_use)."""
    if not set_feature(broker, behaviour, vhost, "quorum", how, {"single-active-consumer": True}):
        return
    before = fresh(source_state(broker.connection, vhost, "row", by_consumer=True))  # 3.10 refuses basic.get here

    captured_and_kept(broker, behaviour, vhost, "quorum", before, "one consumer at a time", by_consumer=True, window=5,
                      **allowed(behaviour, "quorum"))


@pytest.mark.parametrize("how", ["argument", "policy"])
def test_row_single_active_consumer_classic_in_use(broker, behaviour, vhost, how):
    """An application's consumer is the active one and holds message 0: read past it by basic.get."""
    if not set_feature(broker, behaviour, vhost, "classic", how, {"single-active-consumer": True}):
        return
    app = pika.BlockingConnection(broker.connection.pika_parameters(vhost))
    try:
        app_channel = app.channel()
        app_channel.basic_qos(prefetch_count=1)
        held: list[int] = []
        app_channel.basic_consume("row", lambda _ch, _m, _p, body: held.append(sequence_of_body(body)))
        while not held:
            app.process_data_events(time_limit=0.1)
        wait_for_consumers(broker, vhost, "row", 1)  # the capture decides from the management API's count
        before = fresh(source_state(broker.connection, vhost, "row"), order=list(range(1, COUNT)))
        storage = open_storage("memory://")

        result = capture_queue(broker.connection, storage, "b1", vhost, "row")

        assert (held, result.method, result.messages) == ([0], "basic.get", COUNT - 1)
        assert_staged_in_order(storage, vhost, before.order)
        assert_kept(before, source_state(broker.connection, vhost, "row"), behaviour, "classic", captured=True)
    finally:
        app.close()


@pytest.mark.parametrize("how", ["argument", "policy"])
def test_row_single_active_consumer_classic(broker, behaviour, vhost, how):
    if not set_feature(broker, behaviour, vhost, "classic", how, {"single-active-consumer": True}):
        return
    before = fresh(source_state(broker.connection, vhost, "row"))

    captured_and_kept(broker, behaviour, vhost, "classic", before, "one consumer at a time", window=5)


@pytest.mark.parametrize("how", BY_DECLARATION)
def test_row_auto_delete(broker, behaviour, vhost, how):
    """Read by basic.get: the queue still exists afterwards, whole (its deeper case:
    test_queue_features_on_broker.py::test_an_auto_delete_queue_is_read_by_basic_get_and_still_exists_whole_afterwards)."""
    if how == "policy":
        assert not set_feature(broker, behaviour, vhost, "classic", how, {"auto-delete": True})
        return
    set_feature(broker, behaviour, vhost, "classic", "argument", {}, auto_delete=True)
    before = fresh(source_state(broker.connection, vhost, "row"))
    storage = open_storage("memory://")

    result = capture_queue(broker.connection, storage, "b1", vhost, "row")

    assert (result.method, result.messages) == ("basic.get", COUNT)
    assert_staged_in_order(storage, vhost, before.order)
    assert_kept(before, source_state(broker.connection, vhost, "row"), behaviour, "classic", captured=True)


# --- rows that capture as usual --------------------------------------------------------------------------------


@pytest.mark.parametrize("how", HOW)
def test_row_max_length_dropping_the_head(broker, behaviour, vhost, how):
    """The queue full to its max-length: nothing dropped by the capture, nothing left over."""
    if not set_feature(broker, behaviour, vhost, "classic", how, {"max-length": COUNT}):
        return
    before = fresh(source_state(broker.connection, vhost, "row"))

    captured_and_kept(broker, behaviour, vhost, "classic", before, "consumers")


@pytest.mark.parametrize("how", [*HOW, "per-message"])
def test_row_message_ttl(broker, behaviour, vhost, how):
    """A TTL far longer than the test: every message captured and back, none expired."""
    if how == "per-message":
        declare_with(broker, vhost, "row", "classic", "argument", {})
        publish(broker.connection, vhost, "row", COUNT, SIZE, properties=pika.BasicProperties(delivery_mode=2, expiration="600000"))
    elif not set_feature(broker, behaviour, vhost, "classic", how, {"message-ttl": 600_000}):
        return
    before = fresh(source_state(broker.connection, vhost, "row"))

    captured_and_kept(broker, behaviour, vhost, "classic", before, "consumers")


@pytest.mark.parametrize("how", HOW)
def test_row_dead_lettering(broker, behaviour, vhost, how):
    """Nothing reaches the dead-letter queue: the capture gives back with requeue."""
    conn = pika.BlockingConnection(broker.connection.pika_parameters(vhost))
    channel = conn.channel()
    channel.exchange_declare("dlx", "fanout", durable=True)
    channel.queue_declare("dead", durable=True)
    channel.queue_bind("dead", "dlx")
    conn.close()
    if not set_feature(broker, behaviour, vhost, "classic", how, {"dead-letter-exchange": "dlx"}):
        return
    before = fresh(source_state(broker.connection, vhost, "row"))

    captured_and_kept(broker, behaviour, vhost, "classic", before, "consumers")
    assert source_state(broker.connection, vhost, "dead").depth == 0


@pytest.mark.parametrize("how", ["argument", "policy"])
def test_row_consumer_timeout(broker, behaviour, vhost, tmp_path, how):
    """The queue's own timeout of 5 s (the node's is 30 min): a capture whose storage stalls 3.5 s, past the capture's
    budget within it (2.5 s), stops itself before the broker would act, gives everything back and fails, naming the
    timeout; nothing lost or reordered. A quorum queue from 4.3 (a classic queue refuses x-consumer-timeout there)."""
    queue_type = behaviour.per_queue_consumer_timeout_on()
    if not set_feature(broker, behaviour, vhost, queue_type, how, {"consumer-timeout": 5000}):
        return
    before = fresh(source_state(broker.connection, vhost, "row"))
    storage = FaultyStorage(open_storage((tmp_path / "store").as_uri()))
    storage.on_put = lambda key: time.sleep(3.5) if key.endswith("chunk-00000001.zst") else None

    with pytest.raises(ConsumerTimeoutError, match="consumer_timeout of 5000 ms"):
        capture_queue(broker.connection, storage, "b1", vhost, "row", chunk_max_records=4, **allowed(behaviour, queue_type))

    assert_kept(before, source_state(broker.connection, vhost, "row"), behaviour, queue_type, captured=True)


@pytest.mark.rabbitmq("4.3")
def test_on_4_3_a_classic_capture_held_past_the_brokers_consumer_timeout_completes(broker, behaviour, vhost, tmp_path):
    """RabbitMQ 4.3 applies no consumer timeout to classic queues: the node's timeout at 3 s (checked every 0.5 s), a
    capture holding a classic queue's messages twice as long completes with every one, the queue unchanged. (A quorum
    queue's consumer is cancelled there instead: test_queue_features_on_broker.py::
    test_a_capture_that_outlives_the_consumer_timeout_fails_clearly_and_loses_nothing[timeout-unknown].)"""
    declare_with(broker, vhost, "row", "classic", "argument", {})
    publish(broker.connection, vhost, "row", COUNT, SIZE, rich=False)
    before = fresh(source_state(broker.connection, vhost, "row"))
    storage = FaultyStorage(open_storage((tmp_path / "store").as_uri()))
    held_for = 2 * ShortConsumerTimeout.ms / 1000
    storage.on_put = lambda key: time.sleep(held_for) if key.endswith("chunk-00000001.zst") else None

    short = ShortConsumerTimeout(broker)
    try:
        result = capture_queue(broker.connection, storage, "b1", vhost, "row", chunk_max_records=4)
    finally:
        short.restore()

    assert_captured_and_kept(broker, behaviour, vhost, "classic", before, "consumers", storage, result)


def test_row_stream(broker, behaviour, vhost):
    """Read by offset, nothing held: the stream as it was, offsets and all. (A queue type is declared, never set by a
    policy; the table's other rows on a stream: tests/capture/test_queue_features.py, no broker needed.)"""
    declare_with(broker, vhost, "row", "stream", "argument", {"max-age": "1D"})
    publish(broker.connection, vhost, "row", COUNT, SIZE, rich=False, stream=True)
    before = source_state(broker.connection, vhost, "row", stream=COUNT)
    assert before.order == list(range(COUNT))
    storage = open_storage("memory://")

    result = capture_stream(broker, storage, "b1", vhost, "row")

    assert result.messages == COUNT
    assert_staged_in_order(storage, vhost, before.order)
    after = source_state(broker.connection, vhost, "row", stream=COUNT)
    assert (after.order, after.counters(), [m.body for m in after.messages]) == (
        before.order, before.counters(), [m.body for m in before.messages])


# --- 4.0 and 3.10: an allowed capture under a delivery limit ----------------------------------------------------


@pytest.mark.rabbitmq("3.10", "4.0")
@pytest.mark.parametrize("limit", ["default", "policy-3"])
def test_before_4_3_an_allowed_capture_stops_before_any_message_reaches_its_limit(broker, behaviour, vhost, limit):
    """Must show 2 on 4.0: a quorum queue under the default limit of 20 and one under a policy limit of 3, captured
    with allow_delivery_count_increase again and again: each capture raises every x-delivery-count by one, until
    the capture after whose return the next one's would bring a message to its limit stops and gives everything
    back: every message ends one below its limit, none reaches it, nothing is dropped."""
    settings = {"delivery-limit": 3} if limit == "policy-3" else {}
    set_feature(broker, behaviour, vhost, "quorum", "policy" if settings else "argument", settings)
    limit_of = 3 if settings else behaviour.default_delivery_limit("quorum")
    if limit_of is None:  # 3.10 sets no default limit: nothing to refuse, nothing counts toward one
        assert capture_queue(broker.connection, open_storage("memory://"), "b1", vhost, "row").messages == COUNT
        return
    storage = open_storage("memory://")

    # Without permission: left out
    refused = capture_queue(broker.connection, storage, "refused", vhost, "row")
    assert refused.method == "left out" and f"delivery limit of {limit_of}" in refused.left_out

    # With it: captures until one stops (bounded: one more than the limit allows)
    taken, stopped = 0, None
    for n in range(limit_of + 1):
        try:
            result = capture_queue(broker.connection, storage, f"ok-{n}", vhost, "row", allow_delivery_count_increase=True)
        except DeliveryLimitRiskError as exc:
            stopped = str(exc)
            break
        assert (result.messages, result.depth_after) == (COUNT, COUNT)
        taken += 1
    assert stopped is not None and f"delivery limit of {limit_of}" in stopped
    assert taken == limit_of - 2

    # Then every message is still there, in order, byte-exact, each counted once a capture and one below its limit
    # (read without waiting for the messages back: this reading's own return takes them to the limit)
    assert_whole_one_below(state_without_waiting(broker.connection, vhost, "row"), limit_of)


@pytest.mark.rabbitmq("3.10", "4.0")
def test_before_4_3_an_allowed_capture_after_one_that_stopped_drops_nothing(broker, behaviour, vhost):
    """The capture that stops leaves every message one below the limit, and a later capture cannot see a count
    before delivering: its return would bring every message to the limit (and the one after it, past: measured on
    4.0.5 before the stop was one earlier, all 12 dropped). So the stop is recorded in the location and the next
    scheduled run leaves the queue out before receiving anything, saying which backup stopped and what to do."""
    set_feature(broker, behaviour, vhost, "quorum", "policy", {"delivery-limit": 3})
    storage = open_storage("memory://")
    stopped = None
    for n in range(2):  # one completes, the second stops
        try:
            capture_queue(broker.connection, storage, f"ok-{n}", vhost, "row", allow_delivery_count_increase=True)
        except DeliveryLimitRiskError as exc:
            stopped = str(exc)
    key = delivery_limit_stop_key(vhost, "row")
    assert stopped is not None and key in stopped and storage.exists(key)

    # The next scheduled run (another backup id): left out, nothing read from the queue
    third = capture_queue(broker.connection, storage, "ok-2", vhost, "row", allow_delivery_count_increase=True)
    assert (third.method, third.messages) == ("left out", 0)
    assert "backup 'ok-1' stopped at this queue's delivery limit of 3" in third.left_out and key in third.left_out

    # Nothing dropped: every message still there, in order, byte-exact, one below the limit (read last: this
    # reading's own return takes them to it)
    assert depth(broker.connection, vhost, "row", COUNT) == COUNT
    assert_whole_one_below(state_without_waiting(broker.connection, vhost, "row"), 3)
