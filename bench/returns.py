"""Returning held messages to a classic queue: ``basic.nack(multiple, requeue)`` beside closing their channel.

For each way of reading (a consumer with one window of prefetch per step, or
``basic.get``), the script reads every message of a classic queue without
ack, cancels its consumers, and times how long the queue takes to show them
all back after the return: by one ``basic.nack(multiple, requeue)`` on the
reading channel, or by closing that channel. Each round does both, in
alternating order, on the same queue; figures are medians. It also checks
that the queue holds every message in its order afterwards (the bodies carry
their sequence numbers). This is the measurement behind
``airflow_rbak/capture/returns.py``.

    scripts/rabbitmq.sh start
    .venv/bin/python bench/returns.py [--count 20000] [--get-count 5000] [--repeat 3]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
import uuid
from pathlib import Path

import pika

sys.path.insert(0, str(Path(__file__).resolve().parent))
from capture import default_url  # noqa: E402

from airflow_rbak.broker.connection import RabbitMQConnection  # noqa: E402

WINDOW = 65_535


def fill(params: pika.ConnectionParameters, queue: str, count: int) -> None:
    with pika.BlockingConnection(params) as c:
        ch = c.channel()
        ch.queue_declare(queue, durable=True)
        for n in range(count):
            ch.basic_publish("", queue, str(n).encode().ljust(1024, b" "), pika.BasicProperties(delivery_mode=2))
        wait_depth(ch, queue, count)


def wait_depth(ch: pika.adapters.blocking_connection.BlockingChannel, queue: str, count: int) -> None:
    while ch.queue_declare(queue, passive=True).method.message_count < count:
        time.sleep(0.01)


def hold(c: pika.BlockingConnection, holding: pika.adapters.blocking_connection.BlockingChannel, queue: str, count: int,
         read: str, bodies: list[bytes] | None = None) -> int:
    """Read ``count`` messages without ack on ``holding`` (consumers of one window each, then cancelled, or
    ``basic.get``), keeping their bodies in ``bodies`` if given; return the last delivery tag."""
    last = [0]

    def on_message(_ch: object, method: pika.spec.Basic.Deliver, _props: object, body: bytes) -> None:
        last[0] = method.delivery_tag
        if bodies is not None:
            bodies.append(body)

    if read == "get":
        for _ in range(count):
            on_message(None, *holding.basic_get(queue, auto_ack=False))
        return last[0]
    tags, requested = [], 0
    while last[0] < count:  # one channel: its delivery tags count the messages received
        if last[0] == requested:
            step = min(WINDOW, count - requested)
            holding.basic_qos(prefetch_count=step)
            tags.append(holding.basic_consume(queue, on_message))
            requested += step
        c.process_data_events(time_limit=0.1)
    for tag in tags:
        holding.basic_cancel(tag)
    return last[0]


def read_and_return(params: pika.ConnectionParameters, queue: str, count: int, read: str, how: str) -> float:
    """Read ``count`` messages without ack, give them back ``how``; seconds until the depth shows them all."""
    with pika.BlockingConnection(params) as c:
        control, holding = c.channel(), c.channel()
        last = hold(c, holding, queue, count, read)
        started = time.perf_counter()
        if how == "nack":
            holding.basic_nack(last, multiple=True, requeue=True)
        else:
            holding.close()
        wait_depth(control, queue, count)
        return time.perf_counter() - started


def in_order(params: pika.ConnectionParameters, queue: str, count: int) -> bool:
    """Whether the queue holds exactly 0..count-1 in order (all read by consumers, then given back by channel close)."""
    bodies: list[bytes] = []
    with pika.BlockingConnection(params) as c:
        control, holding = c.channel(), c.channel()
        hold(c, holding, queue, count, "consumer", bodies)
        holding.close()
        wait_depth(control, queue, count)
    return [int(body) for body in bodies] == list(range(count))


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", default=default_url())
    parser.add_argument("--count", type=int, default=20_000, help="messages read by consumers")
    parser.add_argument("--get-count", type=int, default=5_000, help="messages read by basic.get (1,000-3,000 msg/s)")
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args(argv)
    params = RabbitMQConnection.from_url(args.url).pika_parameters("/")
    print(f"classic queue, 1 KiB messages, median of {args.repeat} rounds: seconds until every message is back")
    print(f"{'read by':10} {'messages':>9} {'basic.nack':>11} {'close':>8} {'ratio':>6} {'in order':>9}")
    for read, count in (("consumer", args.count), ("get", args.get_count)):
        queue = f"bench-returns-{uuid.uuid4().hex[:6]}"
        fill(params, queue, count)
        try:
            times: dict[str, list[float]] = {"nack": [], "close": []}
            for n in range(args.repeat):
                for how in (("nack", "close") if n % 2 == 0 else ("close", "nack")):
                    times[how].append(read_and_return(params, queue, count, read, how))
            nack, close = statistics.median(times["nack"]), statistics.median(times["close"])
            print(f"{read:10} {count:9,} {nack:11.2f} {close:8.2f} {nack / close:6.1f} {str(in_order(params, queue, count)):>9}",
                  flush=True)
        finally:
            with pika.BlockingConnection(params) as c:
                c.channel().queue_delete(queue)


if __name__ == "__main__":
    main()
