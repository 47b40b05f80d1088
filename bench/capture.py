"""Capture throughput: msg/s and MB/s of QueueCapture/StreamCapture beside a bare pika consumer, same run.

For classic and quorum queues each round fills a fresh queue for the capture
and another for the baseline, a bare pika consumer draining it (same
messages, published the same way, neither read before): prefetch equal
to the capture's window, ``basic.ack(multiple)`` every 1,000 messages, and
nothing done with a message but counting it. For a stream it is a bare AMQP
consumer reading the same stream from offset 0 with the capture's prefetch
and ack pattern. Each round times the capture and the baseline back to back
(order alternating); figures are medians and the ratio is the median of the
per-round ratios, robust to a noisy neighbour ("rounds" gives their range). MB/s counts message bodies.
The capture stages to a local folder (zstd, 8 MiB chunks) and returns every
message, so its time includes staging and the return; the baseline's does not.
"return wait" is the part of the capture spent returning the messages and
waiting until the queue's depth shows them back; "ratio w/o wait" leaves it
out. "again" is the ratio of a second capture of the captured queue, whose
messages the first gave back: on a quorum queue each now carries
``x-delivery-count``, which the broker adds to every delivery, at a cost in
broker CPU that no bare consumer of fresh messages pays. The CPU columns are this process's CPU time per message (the capture's
staging thread included): less noisy than wall time on a shared machine.

    scripts/rabbitmq.sh start
    .venv/bin/python bench/capture.py [--count 50000] [--size 1024] [--repeat 5] [--types classic,quorum,stream]
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from urllib.parse import quote

import pika
import requests

from airflow_rbak.broker.connection import RabbitMQConnection
from airflow_rbak.broker.discovery import describe_queue
from airflow_rbak.broker.management import ManagementClient
from airflow_rbak.capture.checkpoints import CaptureCheckpoints
from airflow_rbak.capture.queue_capture import CaptureOptions, QueueCapture
from airflow_rbak.capture.stream_capture import _ACK_EVERY, _PREFETCH, StreamCapture
from airflow_rbak.storage import open_storage

QUEUE_ACK_EVERY = 1000


def publish(conn: RabbitMQConnection, vhost: str, queue: str, count: int, size: int) -> None:
    """Persistent messages with a few typical properties, then wait until the queue holds them all."""
    props = pika.BasicProperties(delivery_mode=2, content_type="application/json", message_id="m", headers={"source": "bench"})
    body = (b'{"bench":' + b"7" * size)[:size]
    with pika.BlockingConnection(conn.pika_parameters(vhost)) as c:
        ch = c.channel()
        for _ in range(count):
            ch.basic_publish("", queue, body, props)
        while ch.queue_declare(queue, passive=True).method.message_count < count:
            time.sleep(0.05)


def bare_consume(conn: RabbitMQConnection, vhost: str, queue: str, count: int, prefetch: int, ack_every: int,
                 arguments: dict | None = None) -> tuple[float, int, float]:
    """Receive ``count`` messages with a do-nothing callback; return (seconds, body bytes, CPU seconds)."""
    got = [0, 0]
    started, cpu = time.perf_counter(), time.process_time()
    with pika.BlockingConnection(conn.pika_parameters(vhost)) as c:
        ch = c.channel()
        ch.basic_qos(prefetch_count=prefetch)

        def on_message(_ch: object, method: pika.spec.Basic.Deliver, _props: object, body: bytes) -> None:
            got[0] += 1
            got[1] += len(body)
            if got[0] % ack_every == 0 or got[0] == count:
                ch.basic_ack(method.delivery_tag, multiple=True)

        ch.basic_consume(queue, on_message, arguments=arguments)
        while got[0] < count:
            c.process_data_events(time_limit=0.25)
    return time.perf_counter() - started, got[1], time.process_time() - cpu


def run_capture(conn: RabbitMQConnection, vhost: str, queue: str, stream: bool) -> tuple[float, int, float, float]:
    """One capture into a fresh local folder; return (seconds, body bytes, seconds waiting for returns to settle,
    CPU seconds of this process, the staging thread's included)."""
    with tempfile.TemporaryDirectory() as folder, ManagementClient(conn) as mg:
        info, version = describe_queue(mg, vhost, queue), mg.version()
        backup_id = f"bench-{uuid.uuid4().hex[:8]}"
        storage = open_storage(f"file://{folder}/store")
        checkpoints = CaptureCheckpoints(storage, backup_id)
        options = CaptureOptions(backup_id, chunk_max_records=10_000, chunk_max_bytes=8 * 1024 * 1024)
        started, cpu = time.perf_counter(), time.process_time()
        if stream:
            result = StreamCapture(conn, storage, checkpoints, options).capture(info, start_offset=0)
        else:
            result = QueueCapture(conn, storage, checkpoints, options).capture(info, version)
        seconds, cpu = time.perf_counter() - started, time.process_time() - cpu
        checkpoints.close()
    return seconds, result.bytes, result.return_wait_s, cpu


@contextmanager
def filled_queue(conn: RabbitMQConnection, vhost: str, queue_type: str, count: int, size: int) -> Iterator[str]:
    """A new queue of ``queue_type`` holding ``count`` messages from ``publish`` (filled untimed), deleted afterwards."""
    name = f"{queue_type}-{uuid.uuid4().hex[:6]}"
    with pika.BlockingConnection(conn.pika_parameters(vhost)) as c:
        c.channel().queue_declare(name, durable=True, arguments={"x-queue-type": queue_type})
    publish(conn, vhost, name, count, size)
    try:
        yield name
    finally:
        with pika.BlockingConnection(conn.pika_parameters(vhost)) as c:
            c.channel().queue_delete(name)


def capture_fresh_queue(conn: RabbitMQConnection, vhost: str, queue_type: str, count: int, size: int) -> tuple[float, ...]:
    """Time the capture of a fresh queue like the baseline's, then a second capture of it; return the first's
    figures (``run_capture``) and the second's seconds."""
    with filled_queue(conn, vhost, queue_type, count, size) as name:
        first = run_capture(conn, vhost, name, False)
        return (*first, run_capture(conn, vhost, name, False)[0])


def paired(capture: Callable[[], tuple[float, ...]], bare: Callable[[], tuple[float, int, float]], repeat: int, count: int) -> dict:
    rounds = []
    for n in range(repeat):
        if n % 2:
            b, c = bare(), capture()
        else:
            c, b = capture(), bare()
        rounds.append((c, b))
    cap_s = statistics.median(c[0] for c, _ in rounds)
    bare_s = statistics.median(b[0] for _, b in rounds)
    nbytes = rounds[0][0][1]
    return {
        "capture_msg_s": count / cap_s, "capture_mb_s": nbytes / cap_s / 1e6,
        "bare_msg_s": count / bare_s, "bare_mb_s": nbytes / bare_s / 1e6,
        "ratio": statistics.median(b[0] / c[0] for c, b in rounds),
        "ratio_range": (min(b[0] / c[0] for c, b in rounds), max(b[0] / c[0] for c, b in rounds)),
        "return_wait_s": statistics.median(c[2] for c, _ in rounds),
        "ratio_without_wait": statistics.median(b[0] / (c[0] - c[2]) for c, b in rounds),
        "ratio_again": statistics.median(b[0] / c[4] for c, b in rounds) if len(rounds[0][0]) > 4 else None,
        "capture_cpu_us": statistics.median(c[3] for c, _ in rounds) / count * 1e6,
        "bare_cpu_us": statistics.median(b[2] for _, b in rounds) / count * 1e6,
    }


def bench_type(conn: RabbitMQConnection, api: Callable[..., requests.Response], queue_type: str, count: int, size: int, repeat: int) -> dict:
    vhost = f"bench-{uuid.uuid4().hex[:8]}"
    api("PUT", f"vhosts/{quote(vhost, safe='')}")
    api("PUT", f"permissions/{quote(vhost, safe='')}/{quote(conn.username, safe='')}", json={"configure": ".*", "write": ".*", "read": ".*"})
    try:
        if queue_type == "stream":  # a stream capture changes nothing: every round reads the same stream
            with filled_queue(conn, vhost, queue_type, count, size) as name:
                return paired(lambda: run_capture(conn, vhost, name, True),
                              lambda: bare_consume(conn, vhost, name, count, _PREFETCH, _ACK_EVERY, {"x-stream-offset": 0}),
                              repeat, count)
        return paired(lambda: capture_fresh_queue(conn, vhost, queue_type, count, size),
                      lambda: drain_fresh_queue(conn, vhost, queue_type, count, size), repeat, count)
    finally:
        api("DELETE", f"vhosts/{quote(vhost, safe='')}")


def drain_fresh_queue(conn: RabbitMQConnection, vhost: str, queue_type: str, count: int, size: int) -> tuple[float, int, float]:
    """Time a bare consumer draining a fresh queue, filled like the capture's."""
    with filled_queue(conn, vhost, queue_type, count, size) as name:
        return bare_consume(conn, vhost, name, count, CaptureOptions("x").window, QUEUE_ACK_EVERY)


def default_url() -> str:
    """The private node ``scripts/rabbitmq.sh`` starts, on the ports the same environment gives it."""
    env = os.environ.get
    return (f"amqp://guest:guest@127.0.0.1:{env('RBAK_AMQP_PORT', '5672')}/?management_port={env('RBAK_MGMT_PORT', '15672')}"
            f"&stream_port={env('RBAK_STREAM_PORT', '5552')}")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", default=default_url(), help="broker (amqp URL with management_port/stream_port options; "
                        "default: the node scripts/rabbitmq.sh starts with the same RBAK_*_PORT variables)")
    parser.add_argument("--count", type=int, default=50_000)
    parser.add_argument("--size", type=int, default=1024, help="body bytes per message")
    parser.add_argument("--repeat", type=int, default=5, help="rounds; the ratio is their median (a 2-core machine "
                        "shared with the broker moves single rounds by +-0.1)")
    parser.add_argument("--types", default="classic,quorum,stream")
    args = parser.parse_args(argv)
    conn = RabbitMQConnection.from_url(args.url)

    def api(method: str, path: str, **kwargs: object) -> requests.Response:
        r = requests.request(method, f"{conn.management_base_url}/api/{path}", auth=(conn.username, conn.password), timeout=30, **kwargs)
        r.raise_for_status()
        return r

    print(f"{args.count} messages x {args.size} B, median of {args.repeat} rounds")
    print(f"{'queue':8} {'capture msg/s':>14} {'MB/s':>7} {'bare msg/s':>11} {'MB/s':>7} {'ratio':>6} {'rounds':>10} {'return wait s':>14} "
          f"{'ratio w/o wait':>15} {'again':>6} {'CPU us/msg capture':>19} {'bare':>5}")
    for queue_type in args.types.split(","):
        r = bench_type(conn, api, queue_type, args.count, args.size, args.repeat)
        again = "-" if r["ratio_again"] is None else f"{r['ratio_again']:.2f}"
        print(f"{queue_type:8} {r['capture_msg_s']:14,.0f} {r['capture_mb_s']:7.1f} {r['bare_msg_s']:11,.0f} {r['bare_mb_s']:7.1f} "
              f"{r['ratio']:6.2f} {r['ratio_range'][0]:5.2f}-{r['ratio_range'][1]:4.2f} {r['return_wait_s']:14.2f} {r['ratio_without_wait']:15.2f} {again:>6} "
              f"{r['capture_cpu_us']:19.0f} "
              f"{r['bare_cpu_us']:5.0f}", flush=True)


if __name__ == "__main__":
    main()
