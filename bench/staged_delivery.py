"""Per-message cost of a staged delivery: staging it on the consuming thread, and reading it into its record JSON at encode.

The capture stages each delivery as received (``capture/staged_delivery.py``) and the encode step reads it into
its record JSON (``codec/staged_records.read_staged``, no pika). This times, over the same deliveries from a
quorum queue (bodies of ``--size`` bytes), medians of ``--repeat`` rounds, the process's CPU microseconds per
message (CPU time, not wall time: other work on a shared host barely moves it):

- consuming thread: stage the delivery;
- encode: read it on pika, as encode did before the codec read staged records (the oracle in
  ``tests/capture/pika_staged_reader.py``), against the codec's reader; for typical properties (content type,
  delivery mode, message id, timestamp, three headers) and for none.

    .venv/bin/python bench/staged_delivery.py [--count 50000] [--size 1024] [--repeat 5]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

from pika import spec

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from airflow_rbak.broker.amqp_types import DeliveredProperties
from airflow_rbak.capture.staged_delivery import stage_delivery
from airflow_rbak.codec.staged_records import DROPPED_HEADERS, QUORUM_BROKER_HEADERS, read_staged
from tests.capture.pika_staged_reader import pika_read_staged

STAMP = 1_712_756_400_000
QUORUM = DROPPED_HEADERS.index(QUORUM_BROKER_HEADERS)


def deliveries(count: int, size: int, typical: bool = True) -> list[tuple[spec.Basic.Deliver, bytes, bytes]]:
    """(method, property list as on the wire, body) of ``count`` deliveries from a quorum queue."""
    out = []
    for n in range(count):
        props = spec.BasicProperties(
            content_type="application/json", delivery_mode=2, message_id=f"order-{n}", timestamp=STAMP // 1000 + n,
            headers={"source": "shop", "attempt": n % 3, "x-delivery-count": 1},
        ) if typical else spec.BasicProperties()
        body = (b'{"order":%d,"note":"' % n + b"x" * size)[: size - 2] + b'"}'
        method = spec.Basic.Deliver(consumer_tag="rbak-00001", delivery_tag=n + 1, redelivered=False,
                                    exchange="shop", routing_key="orders.created")
        out.append((method, b"".join(props.encode()), body))
    return out


def interleaved(fns: dict[str, Callable[[], object]], count: int, repeat: int) -> dict[str, float]:
    """Median CPU microseconds per message of each function, the rounds of all of them interleaved."""
    rounds: dict[str, list[float]] = {name: [] for name in fns}
    for _ in range(repeat):
        for name, fn in fns.items():
            started = time.process_time()
            fn()
            rounds[name].append((time.process_time() - started) / count * 1e6)
    return {name: statistics.median(times) for name, times in rounds.items()}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, default=50_000)
    parser.add_argument("--size", type=int, default=1024, help="body bytes per message")
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args(argv)
    typical, bare = deliveries(args.count, args.size), deliveries(args.count, args.size, typical=False)
    staged = {name: [stage_delivery(m, DeliveredProperties(raw), body, STAMP, QUORUM) for m, raw, body in items]
              for name, items in (("typical", typical), ("none", bare))}
    for records in staged.values():  # the two readers make the same bytes of these
        assert all(read_staged(s, "orders", "/") == pika_read_staged(s, "orders", "/") for s in records[:100])

    def stage() -> None:
        for m, raw, body in typical:
            stage_delivery(m, DeliveredProperties(raw), body, STAMP, QUORUM)

    def reads(reader: Callable[[bytes, str, str], object], records: list[bytes]) -> Callable[[], None]:
        return lambda: [reader(s, "orders", "/") for s in records]

    fns = {"stage": stage}
    for name, records in staged.items():
        fns[f"pika {name}"], fns[f"codec {name}"] = reads(pika_read_staged, records), reads(read_staged, records)
    t = interleaved(fns, args.count, args.repeat)
    print(f"{args.count} deliveries x {args.size} B, median of {args.repeat} interleaved rounds, CPU us per message")
    print(f"consuming thread: stage a delivery {t['stage']:6.2f}")
    for name in staged:
        before, now = t[f"pika {name}"], t[f"codec {name}"]
        print(f"encode, {name + ' properties:':20} pika reader {before:6.2f}  codec reader {now:6.2f}  ({before / now:.2f}x)")


if __name__ == "__main__":
    main()
