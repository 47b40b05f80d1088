"""Classic and quorum capture against the real broker (must-show 1, 2, 4)."""

from __future__ import annotations

import threading
import time

import pika
import psutil
import pytest

from airflow_rbak.broker import amqp_types
from airflow_rbak.capture.errors import CaptureInterruptedError, DeliveryLimitRiskError, UnsafeQueueError
from airflow_rbak.codec.field_table import encode_value
from airflow_rbak.codec.records import decode_record
from airflow_rbak.storage import open_storage
from tests.broker.behaviour import Behaviour, message_priorities
from tests.broker.helpers import declare, depth, publish
from tests.broker.messages import expected_prefix, sequence_of, split_record
from tests.reliability.faulty_storage import FaultyStorage
from tests.restore.helpers import read_queue

from .helpers import capture_queue, staged_json

pytestmark = pytest.mark.broker


class PeakRss:
    """Samples this process's RSS in a thread; ``growth`` is peak minus the value at start."""

    def __enter__(self) -> PeakRss:
        self._proc = psutil.Process()
        self.start = self.peak = self._proc.memory_info().rss
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)
        self._thread.start()
        return self

    def _sample(self) -> None:
        while not self._stop.wait(0.02):
            self.peak = max(self.peak, self._proc.memory_info().rss)

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    @property
    def growth(self) -> int:
        return self.peak - self.start


def delivery_order(behaviour: Behaviour, queue_type: str, count: int) -> list[int]:
    """The test messages ``0..count-1`` in the order this broker's queue of ``queue_type`` delivers them."""
    return behaviour.delivery_order(queue_type, message_priorities(count))


def assert_first_capture_exact(storage, backup_id: str, vhost: str, queue: str, count: int, size: int, window: tuple[int, int],
                               behaviour: Behaviour, queue_type: str) -> None:
    """Every staged record equals its published message byte for byte, in the queue's delivery order (publish order,
    or by priority on a 4.x quorum queue), first delivery, headers as this broker delivers them."""
    order = delivery_order(behaviour, queue_type, count)
    sort = behaviour.sorts_headers(queue_type)
    n = -1
    for n, raw in enumerate(staged_json(storage, backup_id, vhost, queue)):
        prefix, state = split_record(raw)
        assert prefix == expected_prefix(order[n], size, queue, sorted_headers=sort), f"record {n} differs from message {order[n]}"
        assert state["delivery_tag"] == n + 1 and state["redelivered"] is False, (n, state)
        assert window[0] <= state["backed_up_at"] <= window[1], (n, state)
        assert (state["source_queue"], state["source_vhost"]) == (queue, vhost), (n, state)
    assert n + 1 == count


@pytest.mark.parametrize(("queue_type", "count"), [("classic", 100_000), ("quorum", 70_000)])
def test_deep_queue_captured_exactly_and_left_unchanged(broker, behaviour, vhost, tmp_path, queue_type, count):
    """Queue order is the broker's delivery order: a 4.x quorum queue delivers by priority (tests/broker/behaviour.py),
    and 4.0 counts a capture's returns toward its default delivery limit, so there the capture is allowed to."""
    # Given a queue deeper than the 16-bit prefetch (and, for quorum, far past its 2,000 default)
    declare(broker.connection, vhost, "deep", queue_type)
    publish(broker.connection, vhost, "deep", count)
    storage = open_storage((tmp_path / "store").as_uri())
    allowed = {"allow_delivery_count_increase": True} if behaviour.backup_leaves_out_by_default(queue_type) else {}

    # When it is captured
    started = int(time.time() * 1000)
    with PeakRss() as rss:
        result = capture_queue(broker.connection, storage, "b1", vhost, "deep", chunk_max_bytes=2 * 1024 * 1024, **allowed)
    window = (started, int(time.time() * 1000))

    # Then every message is staged in queue order, byte-exact, with every property and typed header
    assert (result.messages, result.target, result.depth_after, result.bytes) == (count, count, count, count * 1024)
    assert_first_capture_exact(storage, "b1", vhost, "deep", count, 1024, window, behaviour, queue_type)
    # and the client held far less than the data (bodies alone are count KiB; JSON records ~4x that)
    assert rss.growth < count * 1024 / 3, f"peak RSS grew {rss.growth / 1e6:.1f} MB"

    # and the queue is unchanged: same depth, same order, every message back exactly once
    assert depth(broker.connection, vhost, "deep", count, wait=60) == count
    if queue_type == "classic":
        # A classic queue puts a returned message back at its own position whatever the return order,
        # so the exact depth and the head message suffice here; the full second pass is the quorum case's.
        assert head_of(broker.connection, vhost, "deep") == (0, True)
    else:
        # Quorum queues re-enqueue returns in the order they arrive: only a full second pass shows order.
        again = capture_queue(broker.connection, storage, "b2", vhost, "deep", chunk_max_bytes=4 * 1024 * 1024, **allowed)
        assert (again.messages, again.depth_after) == (count, count)
        second = staged_json(storage, "b2", vhost, "deep")
        order = delivery_order(behaviour, queue_type, count)
        assert [(sequence_of(raw), b'"redelivered":true' in raw) for raw in second] == [(i, True) for i in order]


def head_of(connection, vhost: str, queue: str) -> tuple[int, bool]:
    """(message number, redelivered) of the queue's first message, put back unchanged."""
    conn = pika.BlockingConnection(connection.pika_parameters(vhost))
    try:
        ch = conn.channel()
        method, _props, body = ch.basic_get(queue, auto_ack=False)
        ch.basic_nack(method.delivery_tag, requeue=True)
        return int.from_bytes(body[:8], "big"), bool(method.redelivered)
    finally:
        conn.close()


def test_every_wire_type_survives(broker, vhost):
    # Given one message whose header table uses every AMQP 0-9-1 field type, written raw
    import struct

    def field(key: bytes, tag: bytes, payload: bytes) -> bytes:
        return bytes([len(key)]) + key + tag + payload

    inner = b"".join([field(b"k", b"S", struct.pack(">I", 1) + b"v")])
    table = b"".join([
        field(b"t", b"t", b"\x01"), field(b"b", b"b", struct.pack(">b", -5)), field(b"B", b"B", b"\xfa"),
        field(b"s", b"s", struct.pack(">h", -300)), field(b"u", b"u", struct.pack(">H", 65000)),
        field(b"I", b"I", struct.pack(">i", -70000)), field(b"i", b"i", struct.pack(">I", 4_000_000_000)),
        field(b"l", b"l", struct.pack(">q", -(2**60))), field(b"f", b"f", struct.pack(">f", 1.1)),
        field(b"d", b"d", struct.pack(">d", 2.5e-300)), field(b"D", b"D", struct.pack(">Bi", 3, -12345)),
        field(b"S", b"S", struct.pack(">I", 3) + b"\xe2\x82\xac"), field(b"Sbin", b"S", struct.pack(">I", 2) + b"\xff\x00"),
        field(b"x", b"x", struct.pack(">I", 3) + b"\x00\x01\x02"), field(b"T", b"T", struct.pack(">Q", 1_712_756_400)),
        field(b"V", b"V", b""), field(b"F", b"F", struct.pack(">I", len(inner)) + inner),
        field(b"A", b"A", struct.pack(">I", 11) + b"t\x00" + b"l" + struct.pack(">q", 7)),
    ])
    raw = struct.pack(">I", len(table)) + table
    declare(broker.connection, vhost, "types", "classic")
    publish(broker.connection, vhost, "types", 1, properties=amqp_types.TypedBasicProperties(raw_headers=raw))
    storage = open_storage("memory://")

    # When it is captured
    capture_queue(broker.connection, storage, "b1", vhost, "types")

    # Then each value keeps its value and a variant that re-encodes to the same wire type (integers widened)
    (record,) = [decode_record(raw) for raw in staged_json(storage, "b1", vhost, "types")]
    got = dict(record.headers)
    assert [(k, got[k].kind) for k in ("t", "b", "B", "s", "u", "I", "i", "l", "f", "d", "S", "x", "T", "V", "F", "A")] == [
        ("t", "Bool"), ("b", "Short"), ("B", "Short"), ("s", "Short"), ("u", "Long"), ("I", "Long"), ("i", "Long"),
        ("l", "Long"), ("f", "Float"), ("d", "Double"), ("S", "LongString"), ("x", "Bytes"), ("T", "Timestamp"),
        ("V", "Void"), ("F", "Table"), ("A", "Array")]
    assert [got[k].value for k in ("b", "B", "s", "u", "I", "i", "l")] == [-5, 250, -300, 65000, -70000, 4_000_000_000, -(2**60)]
    assert struct.pack(">f", got["f"].value) == struct.pack(">f", 1.1) and got["d"].value == 2.5e-300
    assert encode_value(got["D"]) == b"D" + struct.pack(">Bi", 3, -12345)
    assert encode_value(got["Sbin"]) == b"S" + struct.pack(">I", 2) + b"\xff\x00"
    assert got["S"].value == "\u20ac" and got["T"].value == 1_712_756_400


@pytest.mark.rabbitmq("3.10", "4.0")
def test_delivery_limit_refused_by_default_and_never_exceeded_when_allowed(broker, vhost):
    """RabbitMQ before 4.3 counts every return toward a quorum queue's delivery limit (4.3: the next test)."""
    # Given a quorum queue with x-delivery-limit 3 (honoured from 3.10; every return counts)
    declare(broker.connection, vhost, "limited", "quorum", **{"x-delivery-limit": 3})
    publish(broker.connection, vhost, "limited", 50, size=64)
    storage = open_storage("memory://")

    # When it is backed up without permission, repeatedly: left out before any message is touched, or refused
    for n in range(4):
        left_out = capture_queue(broker.connection, storage, f"refused-{n}", vhost, "limited")
        assert (left_out.messages, left_out.method) == (0, "left out") and "allow_delivery_count_increase" in left_out.left_out
    with pytest.raises(UnsafeQueueError, match="allow_delivery_count_increase"):
        capture_queue(broker.connection, storage, "refused-4", vhost, "limited", on_unsafe_queue="fail")
    assert depth(broker.connection, vhost, "limited", 50) == 50
    assert not list(storage.list("refused-"))

    # When allowed: backups succeed until the next one's return would bring messages to the limit, then one stops
    # and the next is left out (the stop is remembered: limit_stops.py)
    outcomes: list[int | str] = []
    for n in range(3):
        try:
            outcomes.append(capture_queue(broker.connection, storage, f"ok-{n}", vhost, "limited", allow_delivery_count_increase=True).messages)
        except DeliveryLimitRiskError as exc:
            outcomes.append(str(exc))
    assert outcomes[0] == 50 and "delivery limit of 3" in str(outcomes[1]) and outcomes[2] == 0
    # Then no message was lost, and none reached the limit: two returns each, at x-delivery-count 2
    assert depth(broker.connection, vhost, "limited", 50) == 50
    views = read_queue(broker.connection, vhost, "limited", "quorum", 50, broker_headers=True)
    assert [[v.value for k, v in headers if k == "x-delivery-count"] for _b, _p, headers in views] == [[2]] * 50


@pytest.mark.rabbitmq("4.3")
def test_on_4_3_a_delivery_limit_leaves_nothing_out_and_repeated_backups_raise_no_delivery_count(broker, vhost):
    """RabbitMQ 4.3 counts a basic.nack's return in x-acquired-count, not x-delivery-count: a quorum queue under a
    limit of 3 is backed up more times than its limit, unchanged."""
    # Given a quorum queue with x-delivery-limit 3
    declare(broker.connection, vhost, "limited", "quorum", **{"x-delivery-limit": 3})
    publish(broker.connection, vhost, "limited", 50, size=64)
    storage = open_storage("memory://")

    # When it is backed up five times without allow_delivery_count_increase
    results = [capture_queue(broker.connection, storage, f"b{n}", vhost, "limited") for n in range(5)]

    # Then each backup took every message, and the queue still holds all 50, none with a delivery count
    assert [(r.method, r.messages, r.depth_after, r.left_out) for r in results] == [("consumers", 50, 50, None)] * 5
    views = read_queue(broker.connection, vhost, "limited", "quorum", 50, broker_headers=True)
    assert len(views) == 50
    assert [[k for k, _v in headers if k == "x-delivery-count"] for _b, _p, headers in views] == [[]] * 50


@pytest.mark.parametrize("queue_type", ["classic", "quorum"])
def test_order_survives_many_consumers_and_for_quorum_a_delivery_limit(broker, behaviour, vhost, queue_type):
    """40 consumers of 50 messages: a quorum queue's return is in hash order past 32 consumers on a channel, for a
    closed channel (3.10, 4.0) and for one basic.nack of everything a channel holds (4.3). Either way the capture must
    leave the queue in its order (by priority on 4.x)."""
    # Given a queue (quorum: with a delivery limit) captured with a window of 50
    count = 2000
    limit = {"x-delivery-limit": 10} if queue_type == "quorum" else {}
    declare(broker.connection, vhost, "ordered", queue_type, **limit)
    publish(broker.connection, vhost, "ordered", count, size=64)
    storage = open_storage("memory://")
    options = {"window": 50, "allow_delivery_count_increase": True}

    # When it is captured twice
    first = capture_queue(broker.connection, storage, "b1", vhost, "ordered", **options)
    again = capture_queue(broker.connection, storage, "b2", vhost, "ordered", **options)

    # Then each pass staged every message in queue order (delivery order: by priority on a 4.x quorum queue), the
    # second finding each returned once, nothing lost
    order = delivery_order(behaviour, queue_type, count)
    assert (first.messages, first.depth_after, again.messages, again.depth_after) == (count, count, count, count)
    assert [sequence_of(raw) for raw in staged_json(storage, "b1", vhost, "ordered")] == order
    second = staged_json(storage, "b2", vhost, "ordered")
    assert [(sequence_of(raw), b'"redelivered":true' in raw) for raw in second] == [(i, True) for i in order]
    assert depth(broker.connection, vhost, "ordered", count) == count


def test_broker_stopped_mid_capture_then_rerun_completes_without_duplicates(broker, behaviour, vhost, tmp_path):
    # Given a durable classic queue of persistent messages
    count = 24_000
    declare(broker.connection, vhost, "crash", "classic")
    publish(broker.connection, vhost, "crash", count, size=512)
    storage = FaultyStorage(open_storage(f"file://{tmp_path / 'store'}"))

    # When the broker stops as the third chunk is being stored. The store waits for the stop; the capture waits
    # for that store before it hands over a fourth chunk (staging keeps one chunk in flight), and with a window of
    # one chunk it asks the broker for no more than it has received: at most 8,000 of 24,000 messages reach the
    # client before the broker is gone, whatever the machine's speed.
    puts: list[str] = []

    def stop_at_third_chunk(key: str) -> None:
        puts.append(key)
        if sum("/staging/" in k for k in puts) == 3:
            broker.stop()

    storage.on_put = stop_at_third_chunk
    try:
        # (the connection drops, or under load the broker stops delivering first and the capture gives up idle)
        with pytest.raises(CaptureInterruptedError, match="Re-run the same backup_id"):
            capture_queue(broker.connection, storage, "b1", vhost, "crash", chunk_max_records=2000,
                          window=2000)
    finally:
        storage.on_put = None
        broker.start()

    # Then no message was lost
    assert depth(broker.connection, vhost, "crash", count, wait=30) == count
    # And a re-run of the same backup completes with every message exactly once, in order, byte-exact
    result = capture_queue(broker.connection, storage, "b1", vhost, "crash", chunk_max_records=2000)
    assert 0 < result.resumed_from < count and result.messages == count and result.depth_after == count
    staged = [split_record(raw)[0] for raw in staged_json(storage, "b1", vhost, "crash")]
    assert len(staged) == count
    # (headers as this broker delivers them: a 4.x broker sorts them by key, tests/broker/behaviour.py)
    sort = behaviour.sorts_headers("classic")
    first_wrong = next((i for i, prefix in enumerate(staged) if prefix != expected_prefix(i, 512, "crash", sorted_headers=sort)), None)
    assert first_wrong is None, f"staged record {first_wrong} is not message {first_wrong}"
