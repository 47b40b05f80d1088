"""Live traffic for the point-in-time tests: publishers and consumers that write down what they did and when.

Each publisher sends numbered messages to one route with publisher confirms, one at a time, and records the wall
time before the publish and after its confirm; each consumer of a classic or quorum queue acks every message and
records when it received it. A message counts as *published before T* when its confirm came back before T, and as
*consumed before T* when a consumer received it before T: those are the facts a recovery to T must honour, whatever
the machine's speed (the tests compare sets and orders, never durations).
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field

import pika

from airflow_rbak.broker.connection import RabbitMQConnection


def now_ms() -> int:
    return int(time.time() * 1000)


@dataclass
class Sent:
    seq: int
    before: int
    confirmed: int


@dataclass
class Route:
    """Where a publisher sends: an exchange and routing key, the queue its messages land in, and its headers."""

    queue: str
    exchange: str
    routing_key: str
    headers: dict = field(default_factory=dict)


def body(queue: str, seq: int) -> bytes:
    """A body that names its queue and number, with every byte value after it."""
    return f"{queue}:{seq:08d}:".encode() + bytes(range(256))[seq % 256:] + bytes(range(seq % 256))


def properties(queue: str, seq: int, headers: dict) -> pika.BasicProperties:
    return pika.BasicProperties(
        delivery_mode=2, content_type="application/octet-stream", message_id=f"{queue}-{seq}", correlation_id=f"c{seq}",
        timestamp=1_700_000_000 + seq, type="live", app_id="traffic", priority=3,  # one priority: a 4.x quorum queue delivers by it
        headers={"seq": seq, "queue": queue, "even": seq % 2 == 0, **headers})


class Publisher(threading.Thread):
    """Publishes ``queue:seq`` messages to its route until stopped, one confirmed message at a time."""

    def __init__(self, connection: RabbitMQConnection, vhost: str, route: Route, pause: float = 0.005) -> None:
        super().__init__(daemon=True, name=f"publish-{route.queue}")
        self.connection, self.vhost, self.route, self.pause = connection, vhost, route, pause
        self.sent: list[Sent] = []
        self.stopping = threading.Event()
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            conn = pika.BlockingConnection(self.connection.pika_parameters(self.vhost))
            channel = conn.channel()
            channel.confirm_delivery()
            seq = 0
            while not self.stopping.is_set():
                before = now_ms()
                channel.basic_publish(self.route.exchange, self.route.routing_key, body(self.route.queue, seq),
                                      properties(self.route.queue, seq, self.route.headers), mandatory=False)
                self.sent.append(Sent(seq, before, now_ms()))
                seq += 1
                conn.sleep(self.pause)
            conn.close()
        except BaseException as exc:  # noqa: BLE001 - reported by the test
            self.error = exc


class Consumer(threading.Thread):
    """Consumes one classic or quorum queue, acking each message, more slowly than it is published."""

    def __init__(self, connection: RabbitMQConnection, vhost: str, queue: str, pause: float = 0.012) -> None:
        super().__init__(daemon=True, name=f"consume-{queue}")
        self.connection, self.vhost, self.queue, self.pause = connection, vhost, queue, pause
        self.received: list[tuple[int, int]] = []  # (seq, received at)
        self.stopping = threading.Event()
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            conn = pika.BlockingConnection(self.connection.pika_parameters(self.vhost))
            channel = conn.channel()
            channel.basic_qos(prefetch_count=1)
            while not self.stopping.is_set():
                method, props, _ = channel.basic_get(self.queue)
                if method is None:
                    conn.sleep(self.pause)
                    continue
                self.received.append((int(props.headers["seq"]), now_ms()))
                channel.basic_ack(method.delivery_tag)
                conn.sleep(self.pause)
            conn.close()
        except BaseException as exc:  # noqa: BLE001 - reported by the test
            self.error = exc


def required_before(publisher: Publisher, consumer: Consumer | None, moment: int) -> list[int]:
    """The numbers a recovery to ``moment`` must deliver for this route: confirmed before it, not consumed before it."""
    consumed = {seq for seq, at in consumer.received if at < moment} if consumer else set()
    return [s.seq for s in publisher.sent if s.confirmed < moment and s.seq not in consumed]


def never_published_before(publisher: Publisher, moment: int) -> set[int]:
    """Numbers whose publish began at or after ``moment``: no recovery to ``moment`` may need them (it may still
    deliver some: the journal's time resolution is its clock marks')."""
    return {s.seq for s in publisher.sent if s.before >= moment}
