"""Backups of varied messages for the message reader and search tests, and a storage that refuses every write.

Every record differs in what a filter can test, so each filter selects its own subset; :data:`ORDERS` is the
source a test checks a filter's result against with a plain Python predicate (the oracle).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator

import orjson

from airflow_rbak.codec import BackupManifest, BackupProperties, BackupRecord, HeaderValue
from airflow_rbak.storage.base import ObjectInfo, Storage
from tests.repository.backup_writer import BackupWriter

T0 = 1_732_240_800_000  # 2024-11-22T02:00:00Z
ORDER_COUNT = 60


def order(i: int) -> BackupRecord:
    """Order ``i``: its properties, headers, routing key, exchange and body each follow ``i`` differently."""
    text = i % 5 == 0
    body = f"order {4700 + i} as text".encode() if text else orjson.dumps({"order": 4700 + i, "amount": i * 10})
    if i == 7:
        body = b"\x00\xffbinary\x80" + b"4707"
    return BackupRecord(
        body=body,
        properties=BackupProperties(content_type="text/plain" if text else "application/json", delivery_mode=2,
                                    message_id=f"order-{i}", correlation_id=f"corr-{i % 4}"),
        headers=(("x-tenant", HeaderValue.long_string("globex" if i % 3 == 0 else "acme")), ("x-n", HeaderValue.long(i))),
        exchange="orders" if i % 4 else "",
        routing_key=f"orders.{('eu', 'us')[i % 2]}.{('paid', 'refunded', 'new')[i % 3]}",
        delivery_tag=i + 1,
        backed_up_at=T0 + i * 1000,
        source_queue="orders",
        source_vhost="/",
    )


ORDERS = [order(i) for i in range(ORDER_COUNT)]
DLQ = [dataclasses.replace(order(i), source_queue="dlq", source_vhost="prod") for i in range(3)]


def write_backup(storage: Storage, backup_id: str, orders: list[BackupRecord], *, later_by_ms: int = 0,
                 segment_max_bytes: int = 4000, dlq: bool = True) -> BackupManifest:
    """A complete backup of ``orders`` in ``/``/orders (several segments) and :data:`DLQ` in ``prod``/dlq (unless not
    ``dlq``), each
    record taken ``later_by_ms`` later and redelivered when later (a second backup of the same messages)."""
    writer = BackupWriter(storage, backup_id, segment_max_bytes=segment_max_bytes)
    for vhost, name, records in (("/", "orders", orders), ("prod", "dlq", DLQ))[: 2 if dlq else 1]:
        sink = writer.queue(vhost, name)
        sink.add_all(dataclasses.replace(r, backed_up_at=r.backed_up_at + later_by_ms, redelivered=bool(later_by_ms),
                                         delivery_tag=r.delivery_tag + later_by_ms) for r in records)
        sink.close()
    return writer.finish()


class ReadOnlyStorage(Storage):
    """A storage that reads through to another and fails the test on any write or delete."""

    def __init__(self, inner: Storage) -> None:
        self.inner = inner
        self.url = inner.url
        self.gets: list[str] = []

    def get(self, key: str) -> bytes:
        self.gets.append(key)
        return self.inner.get(key)

    def get_range(self, key: str, offset: int, length: int) -> bytes:
        self.gets.append(key)
        return self.inner.get_range(key, offset, length)

    def stat(self, key: str) -> ObjectInfo:
        return self.inner.stat(key)

    def list(self, prefix: str = "") -> Iterator[ObjectInfo]:
        return self.inner.list(prefix)

    def check_location(self) -> None:
        self.inner.check_location()

    def put(self, key: str, data: bytes) -> None:
        raise AssertionError(f"a read wrote {key}")

    def delete(self, key: str) -> None:
        raise AssertionError(f"a read deleted {key}")

    def put_if_absent(self, key: str, data: bytes) -> bool:
        raise AssertionError(f"a read wrote {key}")

    def replace_if_unchanged(self, key: str, data: bytes, tag: str) -> bool:
        raise AssertionError(f"a read wrote {key}")

    def delete_if_unchanged(self, key: str, tag: str) -> bool:
        raise AssertionError(f"a read deleted {key}")
