"""The demo's sample queues and their messages: what a shop's broker might hold, generated reproducibly.

``demo.orders`` (classic) holds order events as JSON with typical properties
and headers, a few with a priority and an expiration; ``demo.payments``
(quorum) holds payment results, one in ten a binary body and a few empty;
``demo.events`` (stream) holds click-stream events with a correlation id.
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable, Iterator

import pika

from airflow_rbak.broker.connection import RabbitMQConnection

#: (name, queue type, message count)
QUEUES: tuple[tuple[str, str, int], ...] = (
    ("demo.orders", "classic", 2000),
    ("demo.payments", "quorum", 1000),
    ("demo.events", "stream", 1500),
)
_EPOCH = 1_767_225_600  # 2026-01-01T00:00:00Z
_SKUS = ["SKU-1001", "SKU-1002", "SKU-2040", "SKU-3300", "SKU-7777", "SKU-9000"]


def _order(rng: random.Random, i: int) -> tuple[bytes, pika.BasicProperties]:
    lines = [{"sku": rng.choice(_SKUS), "qty": rng.randint(1, 4), "price": round(rng.uniform(2, 250), 2)}
             for _ in range(rng.randint(1, 5))]
    body = {"order_id": f"ord-{100000 + i}", "customer": f"cust-{rng.randint(1, 800):04d}", "lines": lines,
            "currency": rng.choice(["EUR", "USD", "GBP"]), "note": "gift wrap" if i % 50 == 0 else None}
    props = pika.BasicProperties(
        content_type="application/json", content_encoding="utf-8", delivery_mode=2, message_id=f"ord-{100000 + i}",
        timestamp=_EPOCH + i * 7, app_id="shop-web", type="order.created", priority=rng.choice([0, 0, 0, 5]),
        expiration="86400000" if i % 100 == 0 else None,
        headers={"x-region": rng.choice(["eu-west", "us-east"]), "x-attempt": i % 3, "x-tenant": "acme",
                 "x-trace": {"span": f"{rng.getrandbits(64):016x}", "sampled": i % 10 == 0}})
    return json.dumps(body, separators=(",", ":")).encode(), props


def _payment(rng: random.Random, i: int) -> tuple[bytes, pika.BasicProperties]:
    if i % 10 == 9:  # an opaque binary payload (e.g. a signed receipt)
        body, content_type = rng.randbytes(rng.randint(64, 512)), "application/octet-stream"
    elif i % 97 == 0:
        body, content_type = b"", None
    else:
        body = json.dumps({"payment_id": f"pay-{i}", "order_id": f"ord-{100000 + rng.randint(0, 1999)}",
                           "amount_cents": rng.randint(199, 99_999), "status": rng.choice(["captured", "declined"]),
                           "card": {"brand": rng.choice(["visa", "mc"]), "last4": f"{rng.randint(0, 9999):04d}"}}).encode()
        content_type = "application/json"
    props = pika.BasicProperties(content_type=content_type, delivery_mode=2, message_id=f"pay-{i}",
                                 correlation_id=f"ord-{100000 + i % 2000}", timestamp=_EPOCH + i * 11,
                                 app_id="payments", headers={"x-psp": rng.choice(["stripe", "adyen"]), "x-amount": i * 3})
    return body, props


def _event(rng: random.Random, i: int) -> tuple[bytes, pika.BasicProperties]:
    body = {"event": rng.choice(["page_view", "add_to_cart", "checkout", "search"]), "session": f"s-{i // 20:05d}",
            "path": rng.choice(["/", "/cart", "/p/sku-1001", "/search?q=lamp"]), "ts_ms": (_EPOCH + i) * 1000}
    props = pika.BasicProperties(content_type="application/json", delivery_mode=2, message_id=f"ev-{i}",
                                 correlation_id=f"s-{i // 20:05d}", timestamp=_EPOCH + i, app_id="clickstream",
                                 headers={"x-source": "web", "x-seq": i})
    return json.dumps(body).encode(), props


_MAKERS: dict[str, Callable[[random.Random, int], tuple[bytes, pika.BasicProperties]]] = {
    "demo.orders": _order, "demo.payments": _payment, "demo.events": _event}


def messages(name: str, count: int) -> Iterator[tuple[bytes, pika.BasicProperties]]:
    """The ``count`` messages of queue ``name``, the same on every run."""
    rng = random.Random(name)
    return (_MAKERS[name](rng, i) for i in range(count))


def seed_messages(connection: RabbitMQConnection, vhost: str) -> None:
    """Declare the demo queues in ``vhost`` and publish their messages (no confirms: the caller reads the depths)."""
    with pika.BlockingConnection(connection.pika_parameters(vhost)) as conn:
        channel = conn.channel()
        for name, queue_type, count in QUEUES:
            channel.queue_declare(name, durable=True, arguments={"x-queue-type": queue_type})
            for body, props in messages(name, count):
                channel.basic_publish("", name, body, props)
