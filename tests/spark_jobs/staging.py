"""Staging for the Spark job tests, written the way capture writes it (deliveries as received, StagingWriter, no
broker)."""

from __future__ import annotations

from dataclasses import replace

from pika import spec

from airflow_rbak.broker.amqp_types import DeliveredProperties
from airflow_rbak.capture.checkpoints import CaptureCheckpoints, QueueProgress
from airflow_rbak.capture.staged_delivery import stage_delivery
from airflow_rbak.codec import BackupProperties, BackupRecord, HeaderValue, encode_record
from airflow_rbak.repository.staging import StagedChunk, StagingWriter
from airflow_rbak.storage.base import Storage
from tests.broker.record_reference import properties_from_record

BASE_TS = 1_712_756_400_000


def make_record(vhost: str, queue: str, i: int) -> BackupRecord:
    """A small record; every 9th has an empty body and every 5th a header, so the JSON varies."""
    return BackupRecord(
        body=b"" if i % 9 == 0 else f"{queue}:{i}".encode(),
        properties=BackupProperties(delivery_mode=2, message_id=f"m{i}"),
        headers=(("x-n", HeaderValue.long(i)),) if i % 5 == 0 else (),
        exchange="",
        routing_key=queue,
        delivery_tag=i + 1,
        redelivered=False,
        backed_up_at=BASE_TS + i // 4,
        source_queue=queue,
        source_vhost=vhost,
    )


def staged_delivery(record: BackupRecord) -> bytes:
    """The record's message as the capture stages its delivery (properties as they came over the wire)."""
    method = spec.Basic.Deliver(consumer_tag="rbak-00001", delivery_tag=record.delivery_tag,
                                redelivered=record.redelivered, exchange=record.exchange, routing_key=record.routing_key)
    wire = b"".join(properties_from_record(record).encode())
    return stage_delivery(method, DeliveredProperties(wire), record.body, record.backed_up_at, 0)


def stage_queue(
    storage: Storage, backup_id: str, vhost: str, queue: str, count: int, *, chunk_records: int = 5000
) -> list[bytes]:
    """Stage ``count`` records of one queue in chunks, as deliveries the way capture stages them, each chunk committed
    to its checkpoint as capture commits it; return the records' JSON in capture order (what encode must make)."""
    checkpoints = CaptureCheckpoints(storage, backup_id)
    progress = QueueProgress(backup_id, vhost, queue, "classic", target_count=count)

    def on_chunk(chunk: StagedChunk) -> None:
        nonlocal progress
        progress = replace(progress, staged_records=progress.staged_records + chunk.record_count, last_chunk=chunk.sequence)
        checkpoints.save(progress)

    writer = StagingWriter(storage, backup_id, vhost, queue, max_records=chunk_records, on_chunk=on_chunk)
    staged = []
    for i in range(count):
        record = make_record(vhost, queue, i)
        writer.add(staged_delivery(record), record.backed_up_at)
        staged.append(encode_record(record))
    writer.flush()
    return staged


def read_queue_independently(storage: Storage, backup_id: str, vhost: str, queue: str) -> tuple[list[int], list[dict]]:
    """(sequence numbers, records) of a queue's stored segments, read by the spec-only reader."""
    import re

    from airflow_rbak.codec.layout import queue_prefix
    from tests.codec.independent_reader import read_segment

    keys = [i.key for i in storage.list(queue_prefix(backup_id, vhost, queue))]
    numbered = sorted((int(re.search(r"segment-(\d+)", k).group(1)), k) for k in keys)
    records: list[dict] = []
    for _sequence, key in numbered:
        header, segment_records = read_segment(storage.get(key))
        assert header["record_count"] == len(segment_records)
        records.extend(segment_records)
    return [n for n, _ in numbered], records
