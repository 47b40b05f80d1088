"""A small but varied backup built through the codec, for storage-level tests."""

from __future__ import annotations

import orjson

from airflow_rbak.backup.writer import BackupWriter
from airflow_rbak.codec import BackupManifest, BackupProperties, BackupRecord, HeaderValue
from airflow_rbak.storage.base import Storage

QUEUES = (("/", "orders", "classic", 240), ("prod", "payments", "quorum", 30), ("prod", "events/eu", "stream", 12))
DEFINITIONS = {
    "rabbitmq_version": "3.10.8",
    "vhosts": [{"name": "/"}, {"name": "prod"}],
    "users": [{"name": "guest"}],
    "exchanges": [{"name": "orders.exchange", "vhost": "/"}],
    "queues": [
        {"name": "orders", "vhost": "/", "arguments": {}},
        {"name": "payments", "vhost": "prod", "arguments": {"x-queue-type": "quorum"}},
        {"name": "events/eu", "vhost": "prod", "arguments": {"x-queue-type": "stream"}},
    ],
}


def sample_records(vhost: str, queue: str, count: int) -> list[BackupRecord]:
    return [
        BackupRecord(
            body=orjson.dumps({"n": i, "queue": queue, "pad": "x" * (i % 50)}) if i % 7 else b"",
            properties=BackupProperties(content_type="application/json", delivery_mode=2, message_id=f"{queue}-{i}"),
            headers=(("x-n", HeaderValue.long(i)), ("x-tags", HeaderValue.array([HeaderValue.short_string("a")]))),
            exchange="orders.exchange" if queue == "orders" else "",
            routing_key=queue,
            delivery_tag=i + 1,
            backed_up_at=1_712_756_400_000 + i * 10,
            source_queue=queue,
            source_vhost=vhost,
        )
        for i in range(count)
    ]


def build_sample_backup(storage: Storage, backup_id: str = "sample-1", segment_max_bytes: int = 4096) -> BackupManifest:
    """Three queues (one rotating through many segments, one named with a ``/``) and definitions."""
    writer = BackupWriter(storage, backup_id, segment_max_bytes=segment_max_bytes, rabbitmq_version="3.10.8")
    for vhost, queue, queue_type, count in QUEUES:
        sink = writer.queue(vhost, queue, queue_type)
        sink.add_all(sample_records(vhost, queue, count))
        sink.close()
    writer.write_definitions(orjson.dumps(DEFINITIONS))
    return writer.finish()
