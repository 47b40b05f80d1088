"""The messages the view's message pages are tested with: a queue of 45 over several segments, each kind of body.

``inbox`` (vhost ``/``) holds, in stored order: JSON orders (``order-1`` … routed ``orders.eu`` or ``orders.us``),
one binary body, one body of HTML with a script, and one text body longer than a preview; ``damaged-1`` is the
same backup with one segment gone (its manifest still reads); ``flipped-1`` the same with one byte of a segment
flipped (it lists ``complete``: only a reader of that segment finds it); ``verify-failed-1`` an intact copy whose
verify a test marks failed.
"""

from __future__ import annotations

import orjson

from airflow_rbak.codec import BackupProperties, BackupRecord, HeaderValue
from airflow_rbak.repository.manifest_store import ManifestStore
from airflow_rbak.storage import open_storage
from tests.repository.backup_writer import BackupWriter
from tests.repository.sample import DEFINITIONS

ORDERS = 42
BINARY = bytes(range(256)) * 2 + b"\x00tail"
SCRIPT = b"<script>window.rbakInjected=1</script><img src=x onerror=\"window.rbakInjected=2\"><b>bold?</b>"
LONG_TEXT = ("line of text " * 400).encode()
#: Position of each special message in the queue (numbered from 1, in stored order).
BINARY_AT, SCRIPT_AT, LONG_AT = ORDERS + 1, ORDERS + 2, ORDERS + 3
TOTAL = ORDERS + 3
FLIPPED, VERIFY_FAILED = "flipped-1", "verify-failed-1"


def _order(i: int) -> BackupRecord:
    region = "eu" if i % 3 else "us"
    return BackupRecord(
        body=orjson.dumps({"order": i, "region": region, "lines": [{"sku": f"sku-{i}", "qty": i % 5 + 1}]}),
        properties=BackupProperties(content_type="application/json", delivery_mode=2, message_id=f"order-{i}",
                                    correlation_id=f"c-{i % 4}", timestamp=1_764_200_000 + i),
        headers=(("x-tenant", HeaderValue.short_string(region)), ("x-n", HeaderValue.long(i))),
        exchange="orders", routing_key=f"orders.{region}", delivery_tag=i, backed_up_at=1_764_200_000_000 + i * 1000,
        source_queue="inbox", source_vhost="/")


def _other(i: int, body: bytes, content_type: str) -> BackupRecord:
    return BackupRecord(body=body, properties=BackupProperties(content_type=content_type, message_id=f"other-{i}"),
                        exchange="", routing_key="inbox", delivery_tag=i, backed_up_at=1_764_200_000_000 + i * 1000,
                        source_queue="inbox", source_vhost="/")


def inbox_records() -> list[BackupRecord]:
    return [_order(i) for i in range(1, ORDERS + 1)] + [
        _other(BINARY_AT, BINARY, "application/octet-stream"), _other(SCRIPT_AT, SCRIPT, "text/html"),
        _other(LONG_AT, LONG_TEXT, "text/plain")]


def build_message_backups(url: str) -> None:
    """``messages-1`` (complete), ``damaged-1`` (a segment missing), ``flipped-1`` (a byte of a segment flipped) and
    ``verify-failed-1`` (intact) in the location at ``url``."""
    storage = open_storage(url)
    for backup_id in ("messages-1", "damaged-1", FLIPPED, VERIFY_FAILED):
        writer = BackupWriter(storage, backup_id, segment_max_bytes=2048, source_cluster="rabbit@ui",
                              rabbitmq_version="4.3.6")
        sink = writer.queue("/", "inbox", "quorum")
        sink.add_all(inbox_records())
        sink.close()
        writer.write_definitions(orjson.dumps(DEFINITIONS))
        writer.finish()
    damaged = ManifestStore(storage).load("damaged-1")
    storage.delete(damaged.queues[0].segments[1].key)
    flipped = ManifestStore(storage).load(FLIPPED).queues[0].segments[1]
    data = bytearray(storage.get(flipped.key))
    data[len(data) // 2] ^= 0x01
    storage.put(flipped.key, bytes(data))
