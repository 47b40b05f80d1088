"""A small but varied backup built through the codec, for storage-level tests."""

from __future__ import annotations

import copy

import orjson

from airflow_rbak.codec import BackupManifest, BackupProperties, BackupRecord, HeaderValue
from airflow_rbak.repository import chain
from airflow_rbak.repository.manifest_store import ManifestStore
from airflow_rbak.storage import open_storage
from airflow_rbak.storage.base import Storage
from tests.repository.backup_writer import BackupWriter

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


STREAM = ("prod", "events/eu")


def chained(storage, base_id: str, backup_id: str, created_at: int) -> BackupManifest:
    """A complete backup whose stream continues ``base_id`` (its own part: a copy of the base's last segment)."""
    base = ManifestStore(storage).load(base_id)
    manifest = copy.deepcopy(base)
    manifest.backup_id, manifest.created_at, manifest.completed_at = backup_id, created_at, created_at + 1
    manifest.queues = [q for q in manifest.queues if (q.vhost, q.name) == STREAM]
    entry = manifest.queues[0]
    entry.extensions["stream_offsets"] = {"first": 12, "last": 12, "last_fingerprint": None}
    own = copy.deepcopy(entry.segments[-1])
    own.key = own.key.replace(f"{base_id}/", f"{backup_id}/", 1).rsplit("/", 1)[0] + "/segment-0001.zst"
    storage.put(own.key, storage.get(entry.segments[-1].key))
    own.sequence = len(entry.segments) + 1
    entry.segments.append(own)
    manifest.definitions = None
    chain.declare_dependencies(manifest)
    manifest.refresh_totals()
    ManifestStore(storage).save(manifest)
    return manifest


def build_sample_chain(url: str) -> str:
    """sample-1 (three queues) and sample-2, whose stream continues sample-1's."""
    storage = open_storage(url)
    base = build_sample_backup(storage, "sample-1", segment_max_bytes=600)
    base.queue(*STREAM).extensions["stream_offsets"] = {"first": 0, "last": 11, "last_fingerprint": None}
    ManifestStore(storage).save(base)
    chained(storage, "sample-1", "sample-2", base.created_at + 1000)
    return url
