"""Reading a journal archive back, and publishing into a journaled vhost, for the journal's tests."""

from __future__ import annotations

from typing import Any

import orjson
import pika

from airflow_rbak.broker.connection import RabbitMQConnection
from airflow_rbak.codec import BackupManifest, decode_segment
from airflow_rbak.journal.archive_run import ArchiveResult, ArchiveSettings, JournalArchive
from airflow_rbak.repository.manifest_store import ManifestStore
from airflow_rbak.storage import open_storage


def archive(connection: RabbitMQConnection, vhost: str, url: str, seconds: float = 30, **kwargs: Any) -> ArchiveResult:
    """One archive run; it stops once the journal is empty (or after ``seconds``)."""
    return JournalArchive(connection, ArchiveSettings(vhost, url, seconds=seconds, **kwargs)).run()


def manifest_of(url: str, backup_id: str) -> BackupManifest:
    return ManifestStore(open_storage(url)).load(backup_id)


def records_of(url: str, backup_id: str) -> list[dict]:
    """The archive's records as their JSON objects, in stored order."""
    storage = open_storage(url)
    manifest = manifest_of(url, backup_id)
    found = []
    for queue in manifest.queues:
        for segment in queue.stored_order():
            found += [orjson.loads(orjson.dumps(r.to_json())) for r in decode_segment(storage.get(segment.key)).records]
    return found


def channel_of(connection: RabbitMQConnection, vhost: str) -> tuple[pika.BlockingConnection, Any]:
    conn = pika.BlockingConnection(connection.pika_parameters(vhost))
    return conn, conn.channel()
