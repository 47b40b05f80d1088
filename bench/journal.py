"""What the journal costs the broker, and how far behind the archive runs (docs/performance.md, "Continuous capture").

(a) Cost: a pipelined confirmed publisher (a window of ``--window`` publishes in flight) sends ``--count`` persistent
1 KiB messages into a classic queue, with the vhost's journal off and on, ``--rounds`` rounds taken in turn (off, on,
off, on, ...). Per round: messages a second, the median and p99 latency from a publish to its confirm, and the broker
process's CPU (user + system core-seconds from /proc, through psutil) per 100,000 messages. Between rounds the queue
and the journal are purged. Medians of the rounds; "on/off" ratios are per pair of rounds, then the median.

(b) Recovery point: a publisher thread sends ``--rate`` messages a second for ``--seconds`` seconds into the journaled
vhost, each with its publish time (wall ms) in a header; meanwhile this process runs archive after archive (each at
most ``--archive-seconds``, stopping earlier once the journal is empty). A message's lag is its archive's
``completed_at`` minus its publish time: median and worst over every message.

    scripts/rabbitmq.sh start
    .venv/bin/python bench/journal.py [--url amqp://guest:guest@127.0.0.1:5672/?management_port=15672] \\
        [--count 20000] [--rounds 3] [--rate 200] [--seconds 60] [--archive-seconds 10]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path
from urllib.parse import quote

import pika
import psutil
import requests

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from airflow_rbak.broker import journal  # noqa: E402
from airflow_rbak.broker.connection import RabbitMQConnection  # noqa: E402
from airflow_rbak.broker.pika_connection import ConfirmChannel, blocking_connection  # noqa: E402
from airflow_rbak.codec import decode_segment  # noqa: E402
from airflow_rbak.journal.archive_run import ArchiveSettings, JournalArchive  # noqa: E402
from airflow_rbak.repository.manifest_store import ManifestStore  # noqa: E402
from airflow_rbak.storage import open_storage  # noqa: E402

BODY = bytes(range(256)) * 4
PERSISTENT = pika.BasicProperties(delivery_mode=2)


def api(conn: RabbitMQConnection, method: str, path: str, **kwargs: object) -> requests.Response:
    response = requests.request(method, f"{conn.management_base_url}/api/{path}", auth=(conn.username, conn.password),
                                timeout=30, **kwargs)
    response.raise_for_status()
    return response


def broker_cpu(pids: list[int]) -> float:
    return sum(sum(psutil.Process(pid).cpu_times()[:2]) for pid in pids)


def publish_round(conn: RabbitMQConnection, vhost: str, count: int, window: int) -> tuple[float, list[float]]:
    """(messages a second, each message's publish-to-confirm latency in ms) of ``count`` pipelined publishes."""
    amqp = blocking_connection(conn.pika_parameters(vhost))
    sent: dict[int, float] = {}
    latencies: list[float] = []
    confirmed = [0]

    def on_confirm(frame: pika.frame.Method) -> None:
        tag, now = frame.method.delivery_tag, time.perf_counter()
        done = [t for t in sent if t <= tag] if frame.method.multiple else [tag]
        for t in done:
            latencies.append((now - sent.pop(t)) * 1000)
        confirmed[0] += len(done)

    channel = ConfirmChannel(amqp, on_confirm)
    started = time.perf_counter()
    for n in range(1, count + 1):
        while n - confirmed[0] > window:
            amqp.process_data_events(time_limit=0.01)
        sent[n] = time.perf_counter()
        channel.publish("", "bench", BODY, PERSISTENT)
    while confirmed[0] < count:
        amqp.process_data_events(time_limit=0.01)
    rate = count / (time.perf_counter() - started)
    amqp.close()
    return rate, latencies


def purge(conn: RabbitMQConnection, vhost: str, *queues: str) -> None:
    amqp = pika.BlockingConnection(conn.pika_parameters(vhost))
    channel = amqp.channel()
    for queue in queues:
        try:
            channel.queue_purge(queue)
        except pika.exceptions.ChannelClosedByBroker:
            channel = amqp.channel()
    amqp.close()


def cost(conn: RabbitMQConnection, vhost: str, args: argparse.Namespace) -> None:
    pids = [int(n["os_pid"]) for n in api(conn, "GET", "nodes").json() if n.get("running") and n.get("os_pid")]
    amqp = pika.BlockingConnection(conn.pika_parameters(vhost))
    amqp.channel().queue_declare("bench", durable=True, arguments={"x-queue-type": "classic"})
    amqp.close()
    figures: dict[str, list[tuple[float, float, float, float]]] = {"off": [], "on": []}
    for _ in range(args.rounds):
        for mode in ("off", "on"):
            if mode == "on":
                journal.enable(conn, vhost)
            else:
                journal.disable(conn, vhost)
            purge(conn, vhost, "bench", journal.JOURNAL_QUEUE)
            cpu = broker_cpu(pids)
            rate, latencies = publish_round(conn, vhost, args.count, args.window)
            cpu = broker_cpu(pids) - cpu
            latencies.sort()
            figures[mode].append((rate, statistics.median(latencies), latencies[int(len(latencies) * 0.99)],
                                  cpu * 100_000 / args.count))
    journal.disable(conn, vhost)
    purge(conn, vhost, "bench", journal.JOURNAL_QUEUE)
    names = ("msg/s", "latency median ms", "latency p99 ms", "broker core-s per 100k")
    print(f"(a) {args.count} persistent 1 KiB messages per round, window {args.window}, {args.rounds} rounds each")
    for i, name in enumerate(names):
        off = statistics.median(f[i] for f in figures["off"])
        on = statistics.median(f[i] for f in figures["on"])
        ratio = statistics.median(b[i] / a[i] for a, b in zip(figures["off"], figures["on"]))
        print(f"  {name:24} off {off:10.2f}   on {on:10.2f}   on/off {ratio:.2f}x")


def recovery_point(conn: RabbitMQConnection, vhost: str, args: argparse.Namespace) -> None:
    journal.enable(conn, vhost)  # its clock mark starts the journal: the first archive's from
    url = Path(tempfile.mkdtemp(prefix="rbak-journal-bench-")).as_uri()
    stop = threading.Event()

    def publisher() -> None:
        amqp = pika.BlockingConnection(conn.pika_parameters(vhost))
        channel = amqp.channel()
        channel.queue_declare("steady", durable=True)
        started, n = time.monotonic(), 0
        try:
            while time.monotonic() - started < args.seconds:
                wait = started + n / args.rate - time.monotonic()
                if wait > 0:
                    amqp.sleep(wait)
                channel.basic_publish("", "steady", BODY, pika.BasicProperties(
                    delivery_mode=2, headers={"bench-published-ms": int(time.time() * 1000)}))
                n += 1
            amqp.close()
        finally:
            stop.set()

    thread = threading.Thread(target=publisher)
    thread.start()
    ids = []
    while not stop.is_set() or journal.journal_depth(conn, vhost) > 0:
        result = JournalArchive(conn, ArchiveSettings(vhost, url, seconds=args.archive_seconds)).run()
        ids.append(result.backup_id)
    thread.join()
    storage, lags = open_storage(url), []
    for backup_id in ids:
        manifest = ManifestStore(storage).load(backup_id)
        for queue in manifest.queues:
            for segment in queue.stored_order():
                for record in decode_segment(storage.get(segment.key)).records:
                    published = dict(record.headers).get("bench-published-ms")
                    if published is not None:
                        lags.append(manifest.completed_at - published.value)
    lags.sort()
    print(f"(b) {args.rate} msg/s for {args.seconds} s, archives of at most {args.archive_seconds} s back to back: "
          f"{len(ids)} archives, {len(lags)} messages; lag publish -> archive stored: median "
          f"{statistics.median(lags) / 1000:.2f} s, worst {lags[-1] / 1000:.2f} s")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", default="amqp://guest:guest@127.0.0.1:5672/?management_port=15672")
    parser.add_argument("--count", type=int, default=20_000)
    parser.add_argument("--window", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--rate", type=float, default=200)
    parser.add_argument("--seconds", type=float, default=60)
    parser.add_argument("--archive-seconds", type=float, default=10)
    args = parser.parse_args()
    conn = RabbitMQConnection.from_url(args.url)
    vhost = f"bench-journal-{uuid.uuid4().hex[:8]}"
    api(conn, "PUT", f"vhosts/{quote(vhost, safe='')}")
    api(conn, "PUT", f"permissions/{quote(vhost, safe='')}/{quote(conn.username, safe='')}",
        json={"configure": ".*", "write": ".*", "read": ".*"})
    try:
        print(f"RabbitMQ {api(conn, 'GET', 'overview').json()['rabbitmq_version']}, {psutil.cpu_count()} cores, "
              f"load average {psutil.getloadavg()[0]:.1f} at the start")
        cost(conn, vhost, args)
        recovery_point(conn, vhost, args)
    finally:
        api(conn, "DELETE", f"vhosts/{quote(vhost, safe='')}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
