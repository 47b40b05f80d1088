"""Where a captured message's record JSON is made: per-message cost on the consuming thread and at encode.

The capture stages each delivery as received (``capture/staged_delivery.py``) and the encode step builds its
record JSON; before, the consuming thread decoded the properties and built the JSON on receipt, and encode
only checked it. This times both ways over the same deliveries (typical properties, three headers, JSON
bodies of ``--size`` bytes), medians of ``--repeat`` rounds, microseconds per message:

- consuming thread: decode the property list + build the record JSON (before) against stage it (now);
- encode: check a staged record JSON (before) against build it from the staged delivery (now).

    .venv/bin/python bench/staged_delivery.py [--count 50000] [--size 1024] [--repeat 5]
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable

from pika import spec

from airflow_rbak.broker.amqp_types import DeliveredProperties, TypedBasicProperties
from airflow_rbak.capture.delivery_json import delivery_record_json
from airflow_rbak.capture.message_identity import QUORUM_BROKER_HEADERS
from airflow_rbak.capture.staged_delivery import DROPPED_HEADERS, read_staged, stage_delivery
from airflow_rbak.codec.records import decode_record

STAMP = 1_712_756_400_000
QUORUM = DROPPED_HEADERS.index(QUORUM_BROKER_HEADERS)


def deliveries(count: int, size: int) -> list[tuple[spec.Basic.Deliver, bytes, bytes]]:
    """(method, property list as on the wire, body) of ``count`` deliveries from a quorum queue."""
    out = []
    for n in range(count):
        props = spec.BasicProperties(
            content_type="application/json", delivery_mode=2, message_id=f"order-{n}", timestamp=STAMP // 1000 + n,
            headers={"source": "shop", "attempt": n % 3, "x-delivery-count": 1},
        )
        body = (b'{"order":%d,"note":"' % n + b"x" * size)[: size - 2] + b'"}'
        method = spec.Basic.Deliver(consumer_tag="rbak-00001", delivery_tag=n + 1, redelivered=False,
                                    exchange="shop", routing_key="orders.created")
        out.append((method, b"".join(props.encode()), body))
    return out


def timed(fn: Callable[[], object], count: int, repeat: int) -> float:
    rounds = []
    for _ in range(repeat):
        started = time.perf_counter()
        fn()
        rounds.append((time.perf_counter() - started) / count * 1e6)
    return statistics.median(rounds)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, default=50_000)
    parser.add_argument("--size", type=int, default=1024, help="body bytes per message")
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args(argv)
    items = deliveries(args.count, args.size)
    staged = [stage_delivery(m, DeliveredProperties(raw), body, STAMP, QUORUM) for m, raw, body in items]
    made = [read_staged(s, "orders", "/")[0] for s in staged]

    def on_receipt() -> None:
        for m, raw, body in items:
            delivery_record_json(m, TypedBasicProperties().decode(raw), body, queue="orders", vhost="/",
                                 backed_up_at=STAMP, drop_headers=QUORUM_BROKER_HEADERS)

    def as_received() -> None:
        for m, raw, body in items:
            stage_delivery(m, DeliveredProperties(raw), body, STAMP, QUORUM)

    def check_json() -> None:
        for raw in made:
            decode_record(raw).backed_up_at  # noqa: B018 - what encode read from each staged record before

    def build_json() -> None:
        for s in staged:
            read_staged(s, "orders", "/")

    before_c, now_c = timed(on_receipt, args.count, args.repeat), timed(as_received, args.count, args.repeat)
    before_e, now_e = timed(check_json, args.count, args.repeat), timed(build_json, args.count, args.repeat)
    print(f"{args.count} deliveries x {args.size} B, median of {args.repeat} rounds, us per message")
    print(f"consuming thread: record JSON on receipt {before_c:6.2f}  staged as received {now_c:6.2f}  "
          f"({before_c / now_c:.1f}x less)")
    print(f"encode:           check staged JSON     {before_e:6.2f}  build it from the delivery {now_e:6.2f}  "
          f"({now_e - before_e:+.2f})")


if __name__ == "__main__":
    main()
