"""What a backup costs live traffic: publish and consume rates, end-to-end latency and CPU, with and without a
capture running, in one run; and how long the capture holds the messages it reads.

Each round fills a fresh *backlog* queue with ``--depth`` messages (untimed) and runs live traffic on a separate
*live* queue of the same type for ``--seconds``: a publisher process (pipelined confirms; ``--rate`` messages a
second, or as fast as it can with 0) and a consumer process (prefetch 100, an ack a message) that stamps each
message's latency, publish to delivery, from a CLOCK_MONOTONIC stamp in its body. In the "with" half of a round
this process captures the backlog queue once (the window is the capture, from its start to its end: the return
of every message and the wait until the queue shows them back); the "without" half that follows sleeps as long
beside a backlog queue just as deep that nobody reads. Figures are medians over rounds; ratios are with/without
per round, then the median.

core-s is CPU seconds in the window of every process involved: the broker nodes (their ``os_pid`` from the
management API, all nodes of a cluster), the traffic processes and this one (the capture), next to the window's
wall time. "held" is how long the capture held each message it read: from its delivery to the capture until the
return of every message it held had been sent (the median message, and the first one, which waits longest).

    scripts/rabbitmq.sh start      (or the cluster of tests/cluster, kept with RBAK_KEEP_BROKERS=1)
    .venv/bin/python bench/live_traffic.py [--url URL] [--type classic] [--depth 20000] [--rate 0] [--repeat 5]
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import statistics
import struct
import tempfile
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any
from urllib.parse import quote

import pika
import psutil
import requests

import airflow_rbak.capture.queue_capture as queue_capture
from airflow_rbak.broker.connection import RabbitMQConnection
from airflow_rbak.broker.discovery import describe_queue
from airflow_rbak.broker.management import ManagementClient
from airflow_rbak.broker.pika_connection import ConfirmChannel
from airflow_rbak.capture.checkpoints import CaptureCheckpoints
from airflow_rbak.capture.queue_capture import CaptureOptions, QueueCapture
from airflow_rbak.storage import open_storage
from bench.capture import default_url, publish

SIZE = 1024


class TimedRun(queue_capture.QueueRun):
    """A capture pass that notes when each message reached it and when the return of them all was sent."""

    held: list[float] = []

    def _on_message(self, ch: object, method: Any, props: Any, body: bytes) -> None:
        self.arrivals = getattr(self, "arrivals", [])
        self.arrivals.append(time.monotonic())
        super()._on_message(ch, method, props, body)

    def give_back(self) -> None:
        super().give_back()
        end = time.monotonic()
        TimedRun.held.extend(end - t for t in getattr(self, "arrivals", []))


def publisher(url: str, vhost: str, queue: str, rate: float, stop: Any, confirmed: Any) -> None:
    conn = pika.BlockingConnection(RabbitMQConnection.from_url(url).pika_parameters(vhost))

    def on_confirm(frame: Any) -> None:
        # RabbitMQ confirms in publish order: the highest tag confirmed is the count confirmed
        confirmed.value = max(confirmed.value, frame.method.delivery_tag)

    channel, props, sent, started = ConfirmChannel(conn, on_confirm), pika.BasicProperties(delivery_mode=2), 0, time.monotonic()
    while not stop.is_set():
        if rate and sent >= (time.monotonic() - started) * rate:
            conn.process_data_events(time_limit=0.001)
            continue
        channel.publish("", queue, struct.pack(">d", time.monotonic()) + bytes(SIZE - 8), props)
        sent += 1
        if sent - confirmed.value > 1000 or sent % 100 == 0:
            conn.process_data_events(time_limit=0)
            while sent - confirmed.value > 1000:  # a window of confirms in flight, as the restore publisher keeps
                conn.process_data_events(time_limit=0.01)
    conn.close()


def consumer(url: str, vhost: str, queue: str, stop: Any, measuring: Any, consumed: Any, out: Any) -> None:
    conn = pika.BlockingConnection(RabbitMQConnection.from_url(url).pika_parameters(vhost))
    channel, latencies = conn.channel(), []
    channel.basic_qos(prefetch_count=100)

    def on_message(ch: Any, method: Any, _props: Any, body: bytes) -> None:
        ch.basic_ack(method.delivery_tag)
        consumed.value += 1
        if measuring.value:
            latencies.append(time.monotonic() - struct.unpack(">d", body[:8])[0])

    channel.basic_consume(queue, on_message)
    while not stop.is_set():
        conn.process_data_events(time_limit=0.05)
    out.put(latencies)
    conn.close()


def cpu_seconds(pids: list[int]) -> float:
    total = 0.0
    for pid in pids:
        try:
            times = psutil.Process(pid).cpu_times()
            total += times.user + times.system + getattr(times, "children_user", 0) + getattr(times, "children_system", 0)
        except psutil.Error:
            pass
    return total


@contextmanager
def queue(conn: RabbitMQConnection, vhost: str, queue_type: str, depth: int) -> Iterator[str]:
    name = f"{queue_type}-{uuid.uuid4().hex[:6]}"
    with pika.BlockingConnection(conn.pika_parameters(vhost)) as c:
        c.channel().queue_declare(name, durable=True, arguments={"x-queue-type": queue_type})
    if depth:
        publish(conn, vhost, name, depth, SIZE)
    try:
        yield name
    finally:
        with pika.BlockingConnection(conn.pika_parameters(vhost)) as c:
            c.channel().queue_delete(name)


def capture_once(conn: RabbitMQConnection, vhost: str, name: str) -> None:
    with tempfile.TemporaryDirectory() as folder, ManagementClient(conn) as mg:
        info, version = describe_queue(mg, vhost, name), mg.version()
        storage = open_storage(f"file://{folder}/store")
        backup_id = f"bench-{uuid.uuid4().hex[:8]}"
        checkpoints = CaptureCheckpoints(storage, backup_id)
        QueueCapture(conn, storage, checkpoints, CaptureOptions(backup_id, allow_delivery_count_increase=True)).capture(info, version)
        checkpoints.close()


def half(conn: RabbitMQConnection, url: str, vhost: str, args: argparse.Namespace, window: float | None,
         broker_pids: list[int]) -> dict:
    """One half of a round: live traffic while the backlog queue is captured (``window`` None), or for ``window``
    seconds beside the same backlog, untouched."""
    ctx = mp.get_context("fork")
    stop, measuring = ctx.Event(), ctx.Value("b", 0)
    confirmed, consumed, out = ctx.Value("q", 0, lock=False), ctx.Value("q", 0, lock=False), ctx.Queue()
    with queue(conn, vhost, args.type, 0) as live:
        procs = [ctx.Process(target=publisher, args=(url, vhost, live, args.rate, stop, confirmed)),
                 ctx.Process(target=consumer, args=(url, vhost, live, stop, measuring, consumed, out))]
        for p in procs:
            p.start()
        time.sleep(1.0)  # the traffic reaches its pace before the window opens
        backlog = queue(conn, vhost, args.type, args.depth)
        name = backlog.__enter__()  # filled before the window opens: filling it is not the capture's cost
        pids = [*broker_pids, *(p.pid for p in procs if p.pid), psutil.Process().pid]
        cpu0, pub0, con0, t0 = cpu_seconds(pids), confirmed.value, consumed.value, time.monotonic()
        measuring.value = 1
        if window is None:
            capture_once(conn, vhost, name)
        else:
            time.sleep(window)
        measuring.value = 0
        wall, cpu = time.monotonic() - t0, cpu_seconds(pids) - cpu0
        pub, con = confirmed.value - pub0, consumed.value - con0
        backlog.__exit__(None, None, None)
        stop.set()
        latencies = out.get(timeout=60)
        for p in procs:
            p.join(30)
    latencies.sort()
    return {"pub": pub / wall, "con": con / wall, "lat_ms": 1000 * statistics.median(latencies),
            "p99_ms": 1000 * latencies[int(len(latencies) * 0.99)], "wall": wall, "cpu": cpu, "cores": cpu / wall}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", default=default_url())
    parser.add_argument("--type", default="classic", choices=["classic", "quorum"])
    parser.add_argument("--depth", type=int, default=20_000, help="messages in the queue each capture holds")
    parser.add_argument("--rate", type=float, default=0, help="live publish rate, msg/s (0: as fast as it can)")
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args(argv)
    conn = RabbitMQConnection.from_url(args.url)

    def api(method: str, path: str, **kwargs: object) -> requests.Response:
        r = requests.request(method, f"{conn.management_base_url}/api/{path}", auth=(conn.username, conn.password), timeout=30, **kwargs)
        r.raise_for_status()
        return r

    broker_pids = [int(n["os_pid"]) for n in api("GET", "nodes").json() if n.get("running") and n.get("os_pid")]
    vhost = f"bench-{uuid.uuid4().hex[:8]}"
    api("PUT", f"vhosts/{quote(vhost, safe='')}")
    api("PUT", f"permissions/{quote(vhost, safe='')}/{quote(conn.username, safe='')}", json={"configure": ".*", "write": ".*", "read": ".*"})
    queue_capture.QueueRun = TimedRun  # type: ignore[misc]
    rounds = []
    try:
        for _ in range(args.repeat):
            with_ = half(conn, args.url, vhost, args, None, broker_pids)
            rounds.append((half(conn, args.url, vhost, args, with_["wall"], broker_pids), with_))
    finally:
        api("DELETE", f"vhosts/{quote(vhost, safe='')}")

    def med(key: str, i: int) -> float:
        return statistics.median(r[i][key] for r in rounds)

    def ratio(key: str) -> float:
        return statistics.median(r[1][key] / r[0][key] for r in rounds)

    rate = f"{args.rate:.0f} msg/s offered" if args.rate else "as fast as it can"
    print(f"{args.type} queues; live traffic {rate}, {SIZE} B; window: one capture of {args.depth} messages (with) or "
          f"as long, beside the same untouched queue (without); median of {args.repeat} rounds ({len(broker_pids)} broker node(s))")
    print(f"{'':8} {'publish msg/s':>14} {'consume msg/s':>14} {'latency ms':>11} {'p99 ms':>8} {'wall s':>7} {'core-s':>7} {'cores':>6}")
    for i, label in ((0, "without"), (1, "with")):
        print(f"{label:8} {med('pub', i):14,.0f} {med('con', i):14,.0f} {med('lat_ms', i):11.1f} {med('p99_ms', i):8.1f} "
              f"{med('wall', i):7.1f} {med('cpu', i):7.1f} {med('cores', i):6.2f}")
    print(f"{'ratio':8} {ratio('pub'):14.2f} {ratio('con'):14.2f} {ratio('lat_ms'):11.2f} {ratio('p99_ms'):8.2f} "
          f"{'':7} {ratio('cpu'):7.2f} {ratio('cores'):6.2f}")
    held = sorted(TimedRun.held)
    print(f"held by the capture: median {statistics.median(held):.2f} s, longest {held[-1]:.2f} s "
          f"({len(held)} messages over {args.repeat} captures)")


if __name__ == "__main__":
    main()
