"""Capturing helpers shared by the capture tests: one capture as every capture runs, and what it staged."""

from __future__ import annotations

from collections.abc import Iterator

from airflow_rbak.broker.connection import RabbitMQConnection
from airflow_rbak.broker.discovery import describe_queue
from airflow_rbak.broker.management import ManagementClient
from airflow_rbak.capture.checkpoints import CaptureCheckpoints
from airflow_rbak.capture.queue_capture import CaptureOptions, CaptureResult, QueueCapture
from airflow_rbak.repository.staging import iter_staged_json, list_chunks
from airflow_rbak.storage.base import Storage


def capture_queue(
    connection: RabbitMQConnection, storage: Storage, backup_id: str, vhost: str, queue: str,
    **options: object,
) -> CaptureResult:
    """One capture, its checkpoints in ``storage`` (as every capture keeps them)."""
    with ManagementClient(connection) as mg:
        info = describe_queue(mg, vhost, queue)
        version = mg.version()
    checkpoints = CaptureCheckpoints(storage, backup_id)
    return QueueCapture(connection, storage, checkpoints, CaptureOptions(backup_id, **options)).capture(info, version)


def staged_json(storage: Storage, backup_id: str, vhost: str, queue: str) -> Iterator[bytes]:
    """Every staged record's JSON in capture order, as the encode step makes it from the staged delivery."""
    for raw, _stamp in iter_staged_json(storage, list_chunks(storage, backup_id, vhost, queue), vhost, queue):
        yield raw
