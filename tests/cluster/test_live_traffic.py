"""A backup of a queue that a publisher and a consumer use throughout the capture (docs/production.md).

The rule: every message present when the capture starts is in the backup, or was acknowledged by a consumer
during the capture; the backup holds no message twice and no more messages than the queue's depth at the start
(so a message published meanwhile is in it only where a consumer took an older one first, and is in the next
backup anyway); the source loses, duplicates and reorders nothing; the report says how many were ready at the start
against how many were captured.

Nothing here waits on a clock to decide anything: the publisher and the consumer run on their own connections (to
nodes 3 and 2; the capture goes through node 1) and every body carries its message number, so the assertions hold
whatever interleaving the three clients and the broker pick, from "the capture read everything before the consumer
got one" to "the consumer drained the queue and the capture completed short".
"""

from __future__ import annotations

import struct
import threading
import time
from typing import Any

import pika
import pytest

from airflow_rbak.backup.run import BackupSettings
from airflow_rbak.broker.connection import RabbitMQConnection
from airflow_rbak.broker.discovery import QueueSelector
from airflow_rbak.storage import open_storage
from tests.broker.behaviour import Behaviour
from tests.cluster.test_node_loss import ResultsKept
from tests.reliability.expect import backed_up
from tests.restore.helpers import declare

pytestmark = pytest.mark.broker
PRESENT = 2_000  # published before the traffic starts
MORE = 3_000  # the most the publisher adds while the traffic runs
SIZE = 256
#: The consumer's work per message: slower than the capture reads, so that the queue is not empty when it starts
#: (the assertions hold either way; this only makes the usual case the interesting one).
WORK_S = 0.004
TRAFFIC_UP = 100  # messages each client handles before the backup starts (the traffic is running, not starting)


def body(n: int) -> bytes:
    return struct.pack(">Q", n) + bytes(SIZE - 8)


def number(data: bytes) -> int:
    return int(struct.unpack(">Q", data[:8])[0])


class SnapshotAtCapture(ResultsKept):
    """A backup run that calls ``at_capture`` just before each queue's capture starts (after discovery)."""

    def __init__(self, *args: Any, at_capture: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.at_capture = at_capture

    def capture(self, info: Any, **kwargs: Any) -> Any:
        self.at_capture()
        return super().capture(info, **kwargs)


class Publisher(threading.Thread):
    """Publishes numbers PRESENT.. with a confirm each, until stopped; ``confirmed`` lists those the broker confirmed."""

    def __init__(self, connection: RabbitMQConnection, vhost: str, queue: str) -> None:
        super().__init__(daemon=True)
        self.params, self.queue = connection.pika_parameters(vhost), queue
        self.confirmed: list[int] = []
        self.stop = threading.Event()
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            with pika.BlockingConnection(self.params) as conn:
                channel = conn.channel()
                channel.confirm_delivery()
                for n in range(PRESENT, PRESENT + MORE):
                    if self.stop.is_set():
                        return
                    channel.basic_publish("", self.queue, body(n), pika.BasicProperties(delivery_mode=2), mandatory=True)
                    self.confirmed.append(n)
        except BaseException as exc:  # noqa: BLE001 - reported by the test
            self.error = exc


class Consumer(threading.Thread):
    """Takes a message, works on it, acks it, until stopped; ``acked`` lists the numbers it acked, in order."""

    def __init__(self, connection: RabbitMQConnection, vhost: str, queue: str) -> None:
        super().__init__(daemon=True)
        self.params, self.queue = connection.pika_parameters(vhost), queue
        self.acked: list[int] = []
        self.redelivered: list[int] = []
        self.stop = threading.Event()
        self.error: BaseException | None = None

    def run(self) -> None:
        """``basic.get`` and an ack, one message at a time: nothing is ever held unacknowledged when it stops (a
        consumer's prefetched messages would be rejected on cancel, which RabbitMQ 3.10 puts at a quorum queue's
        tail, out of order: the consumer's doing, not the backup's)."""
        try:
            with pika.BlockingConnection(self.params) as conn:
                channel = conn.channel()
                while not self.stop.is_set():
                    method, _props, data = channel.basic_get(self.queue, auto_ack=False)
                    if method is None:
                        self.stop.wait(0.01)
                        continue
                    time.sleep(WORK_S)
                    channel.basic_ack(method.delivery_tag)
                    self.acked.append(number(data))
                    if method.redelivered:
                        self.redelivered.append(number(data))
        except BaseException as exc:  # noqa: BLE001 - reported by the test
            self.error = exc


def drain(connection: RabbitMQConnection, vhost: str, queue: str, expected: int, wait: float = 60.0) -> list[int]:
    """Every number left in the queue, in queue order (acked: the test is the queue's last reader)."""
    found: list[int] = []
    with pika.BlockingConnection(connection.pika_parameters(vhost)) as conn:
        channel = conn.channel()
        channel.basic_qos(prefetch_count=500)
        channel.basic_consume(queue, lambda ch, m, _p, data: (found.append(number(data)), ch.basic_ack(m.delivery_tag)))
        deadline = time.monotonic() + wait
        while len(found) < expected and time.monotonic() < deadline:
            conn.process_data_events(time_limit=0.2)
        assert channel.queue_declare(queue, passive=True).method.message_count == 0
    return found


def until(condition: Any, what: str, wait: float = 60.0) -> None:
    deadline = time.monotonic() + wait
    while not condition():
        assert time.monotonic() < deadline, f"no {what} within {wait:.0f} s"
        time.sleep(0.02)


@pytest.mark.parametrize("queue_type", ["classic", "quorum"])
def test_every_message_present_at_the_start_is_in_the_backup_or_was_acked_during_it(cluster, cluster_vhost, tmp_path,
                                                                                   queue_type):
    behaviour = Behaviour(cluster.version)
    vhost, node_2, node_3 = cluster_vhost, cluster.nodes[1].connection, cluster.nodes[2].connection
    # Given a queue on node 2 holding PRESENT messages (confirmed)
    declare(node_2, vhost, {"orders": queue_type})
    with pika.BlockingConnection(node_2.pika_parameters(vhost)) as conn:
        channel = conn.channel()
        channel.confirm_delivery()
        for n in range(PRESENT):
            channel.basic_publish("", "orders", body(n), pika.BasicProperties(delivery_mode=2))
    # And a publisher (through node 3) and a consumer (through node 2) at work on it
    publisher, consumer = Publisher(node_3, vhost, "orders"), Consumer(node_2, vhost, "orders")
    publisher.start()
    consumer.start()
    try:
        until(lambda: len(consumer.acked) >= TRAFFIC_UP and len(publisher.confirmed) >= TRAFFIC_UP, "traffic")
        # What is present when the capture starts, as far as a client can know it: every message confirmed by then
        # and not yet acked (one in the consumer's prefetch counts too; it ends acknowledged during the capture)
        acked_before: set[int] = set()
        present: set[int] = set()

        def snapshot() -> None:
            acked_before.update(consumer.acked)
            present.update((set(range(PRESENT)) | set(publisher.confirmed)) - acked_before)

        # When a backup runs through node 1 meanwhile
        storage = open_storage((tmp_path / "b").as_uri())
        settings = BackupSettings("live-1", storage.url, selector=QueueSelector(vhosts=(vhost,)),
                                  allow_delivery_count_increase=behaviour.backup_leaves_out_by_default(queue_type))
        run = SnapshotAtCapture(cluster.connection(), settings, storage, at_capture=snapshot)
        manifest = run.run()
        acked_by_the_end = set(consumer.acked)
    finally:
        publisher.stop.set()
        publisher.join(60)
        consumer.stop.set()
        consumer.join(60)
    assert publisher.error is None and consumer.error is None, (publisher.error, consumer.error)
    published = set(range(PRESENT)) | set(publisher.confirmed)

    # Then the backup is complete and holds no message twice, and none that was never published
    assert manifest.completed_at is not None
    backup = [number(view[0]) for view in backed_up(storage, "live-1", vhost, "orders")]
    assert len(backup) == len(set(backup)) and set(backup) <= published
    # And every message present at the start is in the backup or was acknowledged during the capture
    acked_during = acked_by_the_end - acked_before
    missing = sorted(present - set(backup) - acked_during)
    assert not missing, f"{len(missing)} messages present at the start are neither backed up nor acked: {missing[:10]}"
    # And the report counts the depth at the start against what was captured (fewer: it completed short)
    (result,) = run.results
    assert result.messages == len(backup) and result.depth_at_start is not None
    assert len(backup) <= result.depth_at_start

    # And the source lost and duplicated nothing: each message was acked once or is still queued, once, in order
    remaining = drain(node_2, vhost, "orders", len(published) - len(consumer.acked))
    assert len(consumer.acked) == len(set(consumer.acked)) and len(remaining) == len(set(remaining))
    assert not set(consumer.acked) & set(remaining)
    assert set(consumer.acked) | set(remaining) == published
    # And a consumer that receives a message the capture held sees it flagged redelivered (it was delivered before)
    assert set(backup) & set(consumer.acked) <= set(consumer.redelivered)
    assert remaining == sorted(remaining)
