"""Restore throughput with publisher confirms beside bare pika publishers on the same broker, same run.

A classic queue of ``--messages`` 1 KiB messages (persistent, a few headers)
is backed up once (``BackupRun``), then each round times, back to back:

* ``restore``: ``RestoreRun.publish`` of that queue into a fresh queue
  (segments read and decoded, records republished with typed headers,
  mandatory, pipelined confirms, checkpoints committed);
* ``pika pipelined``: bare pika publishing the same bodies and properties
  with the same number of unconfirmed messages in flight, waiting for all
  confirms: the strict baseline, the fastest confirmed publishing pika does;
* ``pika per-message``: pika's ``BlockingChannel.confirm_delivery()``, one
  confirm awaited per publish (the usual way), on a tenth of the messages.

Figures are medians over ``--repeat`` rounds; the ratio is the median of the
per-round ratios restore / pika pipelined, robust to a noisy neighbour.

    .venv/bin/python bench/restore.py [--messages 20000] [--repeat 3] [--in-flight 1000]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from urllib.parse import quote

import pika
import requests

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from airflow_rbak.backup.run import BackupRun, BackupSettings  # noqa: E402
from airflow_rbak.broker.connection import RabbitMQConnection  # noqa: E402
from airflow_rbak.broker.discovery import QueueSelector  # noqa: E402
from airflow_rbak.restore import RestoreRequest, RestoreRun  # noqa: E402

BODY_SIZE = 1024


def message(i: int) -> tuple[bytes, pika.BasicProperties]:
    body = (f"{i:08d}".encode() * (BODY_SIZE // 8 + 1))[:BODY_SIZE]
    props = pika.BasicProperties(delivery_mode=2, content_type="application/json", message_id=f"m-{i}",
                                 headers={"seq": i, "source": "bench", "ok": True})
    return body, props


def pipelined_publish(connection: RabbitMQConnection, vhost: str, queue: str, count: int, in_flight: int,
                      gate: Callable[[], None] | None = None) -> float:
    """Bare pika: at most ``in_flight`` unconfirmed, all confirmed at the end; returns seconds (from after ``gate``
    returns, once connected and with every message built: several publishers start together that way)."""
    with pika.BlockingConnection(connection.pika_parameters(vhost)) as conn:
        channel = conn.channel()
        channel.queue_declare(queue, durable=True)
        impl = channel._impl  # noqa: SLF001
        acked: set[int] = set()
        ready: list[bool] = []

        def on_confirm(frame: pika.frame.Method) -> None:
            tag = frame.method.delivery_tag
            acked.update(range(1, tag + 1) if frame.method.multiple else (tag,))

        impl.confirm_delivery(ack_nack_callback=on_confirm, callback=lambda _f: ready.append(True))
        while not ready:
            conn.process_data_events(time_limit=0.05)
        messages = [message(i) for i in range(count)]
        if gate is not None:
            gate()
        started = time.perf_counter()
        for i, (body, props) in enumerate(messages, start=1):
            while i - len(acked) > in_flight:
                conn.process_data_events(time_limit=0.05)
            impl.basic_publish("", queue, body, props, mandatory=True)
        while len(acked) < count:
            conn.process_data_events(time_limit=0.05)
        return time.perf_counter() - started


def per_message_publish(connection: RabbitMQConnection, vhost: str, queue: str, count: int) -> float:
    with pika.BlockingConnection(connection.pika_parameters(vhost)) as conn:
        channel = conn.channel()
        channel.queue_declare(queue, durable=True)
        channel.confirm_delivery()
        messages = [message(i) for i in range(count)]
        started = time.perf_counter()
        for body, props in messages:
            channel.basic_publish("", queue, body, props, mandatory=True)
        return time.perf_counter() - started


def restore_once(connection: RabbitMQConnection, location: str, vhost: str, target: str, state: Path, in_flight: int) -> float:
    settings = RestoreRequest(location, backup_id="bench-1", queue_map={"source": target}, max_in_flight=in_flight,
                               checkpoint_state=str(state / f"{target}.db"))
    run = RestoreRun(connection, settings)
    plan = run.plan()
    started = time.perf_counter()
    result = run.publish(plan, plan.queues[0])
    elapsed = time.perf_counter() - started
    assert result.published == plan.queues[0].records_in_window, result
    return elapsed


def bench_args(description: str, messages: int) -> argparse.ArgumentParser:
    """The options the restore benches share: how many messages, rounds, in flight, and which broker."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--messages", type=int, default=messages)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--in-flight", type=int, default=1000)
    parser.add_argument("--amqp-url", default="amqp://guest:guest@127.0.0.1:5672/")
    return parser


def management(connection: RabbitMQConnection) -> tuple[str, tuple[str, str]]:
    """The management API's base URL and credentials, for making and dropping the bench's vhosts."""
    return f"{connection.management_base_url}/api", (connection.username, connection.password)


class ScratchVhosts:
    """The bench's vhosts: each one made or named here is deleted when dropped, and on exit whatever is left."""

    def __init__(self, connection: RabbitMQConnection) -> None:
        self.base, self.auth = management(connection)
        self.names: list[str] = []

    def __enter__(self) -> ScratchVhosts:
        return self

    def __exit__(self, *_: object) -> None:
        for name in list(self.names):
            self.drop(name)

    def name(self, prefix: str) -> str:
        """A new vhost name, deleted later: for a vhost what the bench runs makes (a restore's target)."""
        name = f"{prefix}-{uuid.uuid4().hex[:8]}"
        self.names.append(name)
        return name

    def make(self, prefix: str) -> str:
        """A new, empty vhost."""
        name = self.name(prefix)
        requests.put(f"{self.base}/vhosts/{quote(name, safe='')}", auth=self.auth, timeout=30).raise_for_status()
        return name

    def drop(self, name: str) -> None:
        """Delete the vhost (the broker's memory back before the next round)."""
        requests.delete(f"{self.base}/vhosts/{quote(name, safe='')}", auth=self.auth, timeout=300)
        self.names.remove(name)


def main(argv: list[str] | None = None) -> int:
    args = bench_args(__doc__.split("\n")[0], 20000).parse_args(argv)
    connection = RabbitMQConnection.from_url(args.amqp_url)
    with ScratchVhosts(connection) as scratch, tempfile.TemporaryDirectory() as tmp:
        return _bench(connection, scratch.make("bench"), Path(tmp), args)


def _bench(connection: RabbitMQConnection, vhost: str, tmp: Path, args: argparse.Namespace) -> int:
    pipelined_publish(connection, vhost, "source", args.messages, args.in_flight)
    location = (tmp / "backups").as_uri()
    started = time.perf_counter()
    BackupRun(connection, BackupSettings("bench-1", location, selector=QueueSelector(vhosts=(vhost,)))).run()
    print(f"backup of {args.messages} x {BODY_SIZE} B: {time.perf_counter() - started:.1f} s")
    rows = []
    for r in range(args.repeat):
        restore_s = restore_once(connection, location, vhost, f"restored-{r}", tmp, args.in_flight)
        pipe_s = pipelined_publish(connection, vhost, f"pika-{r}", args.messages, args.in_flight)
        single_n = max(1, args.messages // 10)
        single_s = per_message_publish(connection, vhost, f"single-{r}", single_n)
        rows.append((args.messages / restore_s, args.messages / pipe_s, single_n / single_s))
        print(f"round {r + 1}: restore {rows[-1][0]:,.0f} msg/s, pika pipelined {rows[-1][1]:,.0f} msg/s, "
              f"pika per-message {rows[-1][2]:,.0f} msg/s")
    restore, pipe, single = (statistics.median(col) for col in zip(*rows))
    ratio = statistics.median(a / b for a, b, _ in rows)
    print(f"median: restore {restore:,.0f} msg/s | pika pipelined {pipe:,.0f} msg/s | pika per-message {single:,.0f} msg/s")
    print(f"ratio restore / pika pipelined: {ratio:.2f} (target >= 0.7); restore / per-message: {restore / single:.1f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
